"""The package keeps its structure's rules (scripts/check_structure.py): no import circle, no import
that reaches a layer above its own, folders of at most 12 modules and modules of at most 800 lines;
and the checker sees each kind of break."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_structure", ROOT / "scripts" / "check_structure.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_keeps_its_structure() -> None:
    assert checker().problems() == []


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "trainmon" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checker_sees_a_circle_through_a_function_level_import(tmp_path: Path) -> None:
    root = write(tmp_path, {
        "__init__.py": "",
        "store/__init__.py": "",
        "store/a.py": "from . import b\n",
        "store/b.py": "def later():\n    from . import a\n",
    })
    assert checker().problems(root) == ["modules in a circle: trainmon.store.a, trainmon.store.b"]


def test_the_checker_sees_an_import_a_layer_up_even_under_type_checking(tmp_path: Path) -> None:
    root = write(tmp_path, {
        "__init__.py": "",
        "store/__init__.py": "",
        "store/rows.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..api import thing\n",
        "api/__init__.py": "",
        "api/thing.py": "",
    })
    said = checker().problems(root)
    assert len(said) == 1 and "trainmon.store.rows imports trainmon.api" in said[0] and "a layer above" in said[0]


def test_the_checker_sees_a_crowded_folder_and_a_long_module(tmp_path: Path) -> None:
    files = {"__init__.py": "", "jobs/__init__.py": ""} | {f"jobs/m{index}.py": "" for index in range(13)}
    files["jobs/m0.py"] = "x = 1\n" * 801
    said = checker().problems(write(tmp_path, files))
    assert [line.removeprefix(tmp_path.name + "/") for line in said] == [
        "trainmon/jobs/m0.py: 801 lines, over 800", "trainmon/jobs/: 13 modules, over 12"]


def test_the_checker_sees_a_circle_between_packages(tmp_path: Path) -> None:
    root = write(tmp_path, {
        "__init__.py": "",
        "server/__init__.py": "",
        "server/check.py": "from .aws import model\n",
        "server/aws/__init__.py": "",
        "server/aws/model.py": "",
        "server/aws/door.py": "from .. import check\n",
    })
    # no two modules import each other: the circle is server.check -> server.aws -> server.check
    assert checker().problems(root) == ["packages in a circle: trainmon.server.aws, trainmon.server.check"]


def test_the_checker_sees_an_import_a_layer_up_inside_runtime(tmp_path: Path) -> None:
    """runtime/'s folders are layered too: capture/ may not reach job/ (above it), even lazily."""
    root = write(tmp_path, {
        "__init__.py": "",
        "runtime/__init__.py": "",
        "runtime/capture/__init__.py": "",
        "runtime/capture/writer.py": "def later():\n    from ..job import supervisor\n",
        "runtime/job/__init__.py": "",
        "runtime/job/supervisor.py": "",
    })
    said = checker().problems(root)
    assert len(said) == 1 and said[0].endswith(
        "trainmon.runtime.capture.writer imports trainmon.runtime.job.supervisor, a layer above within runtime/"), said
