"""The documentation stays true: the CLI reference is regenerated text, every page is reachable,
every `trainmon` command shown parses, the architecture's module table names every module, and the
README tour and the Python page's examples run."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from trainmon.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
ARCHITECTURE = DOCS / "architecture.md"
PACKAGE = ROOT / "src" / "trainmon"
TABLE_HEADER = "| folder / module | holds | I/O |"
PAGES = sorted(DOCS.glob("*.md"))
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def blocks(path: Path, *languages: str) -> list[str]:
    """The bodies of a page's fenced code blocks in the given languages, in order."""
    return [body for language, body in FENCE.findall(path.read_text(encoding="utf-8")) if language in languages]


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for a page's headings."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def trainmon_commands(text: str, *, prompted_only: bool = False) -> list[list[str]]:
    """Every ``trainmon ...`` command in shell text (or, with ``prompted_only``, on the lines of a
    transcript that start with "$ "), as argv without the program name."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if prompted_only and not line.startswith("$ "):
            continue
        line = line.removeprefix("$ ")
        if not line or line.startswith("#"):
            continue
        words = shlex.split(line, comments=True)
        while "trainmon" in words:
            words = words[words.index("trainmon") + 1:]
            argv = []
            for word in words:
                if word in ("|", "&&", ";", ">", ">>", "<"):
                    break
                argv.append(word)
            commands.append(argv)
            words = words[len(argv):]
    return commands


# -- the CLI reference -----------------------------------------------------------------------


def test_cli_reference_is_generated_from_the_current_parser() -> None:
    expected = _generator().render()
    current = (DOCS / "cli.md").read_text(encoding="utf-8") if (DOCS / "cli.md").exists() else ""
    assert current == expected, (
        "docs/cli.md does not match the command's parser: run `python3 scripts/gen_cli_docs.py` and commit the result"
    )


def test_every_subcommand_and_option_is_in_the_cli_reference() -> None:
    reference = (DOCS / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    commands = _generator().subcommands(parser)
    assert commands, "the parser has no subcommands?"
    missing = []
    for name, sub in [("", parser), *commands]:
        title = f"## trainmon {name}".rstrip()
        if f"\n{title}\n" not in reference:
            missing.append(title)
        for action in sub._actions:
            missing += [f"{title}: {option}" for option in action.option_strings if option not in reference]
    assert not missing, f"missing from docs/cli.md: {missing}; run `python3 scripts/gen_cli_docs.py`"


def test_generator_check_mode_agrees() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


# -- pages and links -------------------------------------------------------------------------


def test_readme_opens_with_one_paragraph_then_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    title, _, rest = text.partition("\n")
    assert title.startswith("# ")
    before, fence, _ = rest.partition("```")
    paragraphs = [p for p in before.split("\n\n") if p.strip()]
    assert fence and len(paragraphs) == 1, "the README starts with one paragraph on what trainmon is, then the commands"
    first = FENCE.findall(text)[0]
    assert first[1].strip().splitlines() == [
        "python3 -m pip install -e '.[demo]' && trainmon demo",
        "./scripts/test",
    ]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "./scripts/test" in ci


def test_every_docs_page_is_linked_from_the_readme() -> None:
    assert PAGES, "no pages under docs/"
    targets = {link.split("#")[0] for link in LINK.findall(README.read_text(encoding="utf-8"))}
    unlinked = [f"docs/{page.name}" for page in PAGES if f"docs/{page.name}" not in targets]
    assert not unlinked, f"README.md links to no {unlinked}"


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_to_pages_and_headings_resolve(page: Path) -> None:
    broken = []
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for link in LINK.findall(text):
        if "://" in link or link.startswith("mailto:"):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.is_relative_to(DOCS) and path != README:
            continue  # other engineers' files (benchmarks/README.md) are checked where they live
        if not path.exists():
            broken.append(link)
        elif anchor and anchor not in anchors(path):
            broken.append(link)
    assert not broken, f"{page.name}: broken links {broken}"


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_trainmon_commands_shown_parse(page: Path) -> None:
    parser = build_parser()
    shown = [argv for body in blocks(page, "sh") for argv in trainmon_commands(body)]
    shown += [argv for body in blocks(page, "text") for argv in trainmon_commands(body, prompted_only=True)]
    bad = []
    for argv in shown:
        try:
            parser.parse_args(argv)
        except SystemExit:
            bad.append(shlex.join(["trainmon", *argv]))
    assert not bad, f"{page.name}: these commands do not parse: {bad}"


# -- the architecture's module table ---------------------------------------------------------


def module_table() -> list[list[str]]:
    """The rows of docs/architecture.md's module table (the one headed ``TABLE_HEADER``), as cells."""
    lines = ARCHITECTURE.read_text(encoding="utf-8").splitlines()
    assert TABLE_HEADER in lines, f"docs/architecture.md has no module table ({TABLE_HEADER})"
    rows = []
    for line in lines[lines.index(TABLE_HEADER) + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def backticked(text: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", text))


def holds_more_than_imports(init: Path) -> bool:
    """Whether a package's ``__init__`` holds more than its docstring, imports (those under
    ``TYPE_CHECKING`` too) and ``__all__``: such an ``__init__`` is a module the table names."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            continue
        if isinstance(node, ast.Assign) and [ast.unparse(target) for target in node.targets] == ["__all__"]:
            continue
        return True
    return False


def package_modules() -> list[Path]:
    """Every module of the package, relative to it: each ``.py`` in a package folder (not the console's
    files), an ``__init__`` only where it holds more than imports."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        folders = [path.parent, *path.parent.parents]
        if not all((folder / "__init__.py").exists() for folder in folders[:folders.index(PACKAGE) + 1]):
            continue
        if path.name == "__init__.py" and not holds_more_than_imports(path):
            continue
        found.append(path.relative_to(PACKAGE))
    return found


def test_architecture_table_names_every_module() -> None:
    """A module at the top of the package is named, in backticks, in the first cell of a row; any other
    is named by its file's stem, in backticks, in the row whose first cell names its folder
    (`runtime/capture/`). An ``__init__`` is named only where it holds more than imports."""
    top: set[str] = set()
    folders: dict[str, list[set[str]]] = {}
    for first, *rest in module_table():
        for name in backticked(first):
            if name.endswith("/"):
                folders.setdefault(name, []).append(backticked(" ".join([first, *rest])))
            else:
                top.add(name)
    modules = package_modules()
    assert len(modules) > 100, "the package's modules were not found"
    missing = []
    for module in modules:
        folder = f"{module.parent.as_posix()}/" if module.parent.parts else ""
        if not folder:
            if module.stem not in top:
                missing.append(f"`{module.stem}` (src/trainmon/{module}): add it to a top-level row's first cell")
        elif folder not in folders:
            missing.append(f"`{module.stem}` (src/trainmon/{module}): add a row whose first cell is `{folder}`")
        elif len(folders[folder]) > 1:
            missing.append(f"`{folder}` is the first cell of {len(folders[folder])} rows: make them one")
        elif module.stem not in folders[folder][0]:
            missing.append(f"`{module.stem}` (src/trainmon/{module}): add it, with what it holds, to row `{folder}`")
    assert not missing, "docs/architecture.md's module table (## Layers), a module not named:\n" + "\n".join(
        dict.fromkeys(missing))


def test_architecture_table_names_only_what_exists() -> None:
    modules = package_modules()
    stems = {module.stem for module in modules if not module.parent.parts}
    gone = []
    for first, *_ in module_table():
        for name in backticked(first):
            if name.endswith("/") and not (PACKAGE / name / "__init__.py").exists():
                gone.append(f"`{name}`: no such package under src/trainmon")
            elif not name.endswith("/") and name not in stems:
                gone.append(f"`{name}`: no such module at the top of src/trainmon")
    assert not gone, f"docs/architecture.md's module table names what is not there: {gone}"


# -- examples that run -----------------------------------------------------------------------


def _shims(tmp_path: Path) -> dict[str, str]:
    """An environment where `trainmon` and `python3` are this interpreter, with a fresh data directory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, target in (("trainmon", f'"{sys.executable}" -m trainmon'), ("python3", f'"{sys.executable}"')):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {target} "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "TRAINMON_HOME": str(tmp_path / "home"), "PYTHONWARNINGS": ""}


@pytest.mark.timeout(600)  # heavy by design: room for a machine busy with other tests
def test_readme_tour_runs(tmp_path: Path) -> None:
    env = _shims(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    text = README.read_text(encoding="utf-8")
    start = text.index("## A two-minute tour\n")
    tour = text[start:text.index("\n## ", start + 1)]
    ran = 0
    for language, body in FENCE.findall(tour):
        if language == "python" and body.startswith("# "):
            (work / body.split("\n", 1)[0][2:].strip()).write_text(body, encoding="utf-8")
            continue
        if language == "python":
            program = [sys.executable, "-c", body]
            result = subprocess.run(program, cwd=work, env=env, capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, f"README Python example failed:\n{body}\n{result.stderr}"
            ran += 1
            continue
        if language != "sh":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.startswith("trainmon server"):  # it serves until stopped: see that it serves the tour's job
                _serve_once(line.split(" #")[0].strip(), work, env)
                ran += 1
                continue
            result = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True,
                                    timeout=90)
            assert result.returncode == 0, f"README command failed ({result.returncode}): {line}\n{result.stderr}"
            ran += 1
    assert ran >= 8, "the tour's blocks were not found"
    describe = subprocess.run(["trainmon", "describe", "my-job"], cwd=work, env=env, capture_output=True, text=True,
                              timeout=60)
    assert "train:error: 5 points" in describe.stdout
    stopped = subprocess.run(["trainmon", "list", "--json"], cwd=work, env=env, capture_output=True, text=True,
                             timeout=60)
    assert '"TrainingJobStatus": "Stopped"' in stopped.stdout


def _serve_once(line: str, work: Path, env: dict[str, str]) -> None:
    """Start the tour's ``trainmon server`` on a free port, ask it for the jobs, stop it with Ctrl-C."""
    import json
    import signal
    import urllib.request

    server = subprocess.Popen(["bash", "-c", f"exec {line} --port 0"], cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        found = re.search(r"(http://\S+)/ ", first)
        assert found, f"README command failed: {line}\n{first}{server.stdout.read()}"
        token = (Path(env["TRAINMON_HOME"]) / "server-token").read_text().strip()  # what the server made
        request = urllib.request.Request(found.group(1) + "/api/jobs", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            jobs = json.load(answer)["TrainingJobSummaries"]
        assert "my-job" in [job["TrainingJobName"] for job in jobs]
    finally:
        server.send_signal(signal.SIGINT)
        assert server.wait(60) == 0
        if server.stdout is not None:
            server.stdout.close()


def test_python_page_examples_run(tmp_path: Path) -> None:
    code = "\n\n".join(blocks(DOCS / "python.md", "python"))
    assert "create_training_job" in code and "get_log_events" in code
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_shims(tmp_path), capture_output=True,
                            text=True, timeout=100)
    assert result.returncode == 0, f"docs/python.md examples failed:\n{result.stderr}"
    out = result.stdout
    assert "Completed Completed" in out
    assert "train:error 0.1 " in out
    assert "epoch 3 Train_error=0.100;" in out
    assert "\nStopped\n" in out
    assert "ValidationException\nRequested resource not found." in out
