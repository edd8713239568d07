"""Check the package's structure: no import circle between modules or between packages (imports
inside functions and under ``TYPE_CHECKING`` count), no import that reaches a layer above its own
(between the package's folders, and between runtime/'s), no folder of more than 12 modules and no
module of more than 800 lines.

    python3 scripts/check_structure.py          # what breaks a rule, one line each; exit 1 if any
    python3 scripts/check_structure.py --graph  # and the imports between packages
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "trainmon"
MAX_MODULES = 12  # per folder, __init__ not counted
MAX_LINES = 800

# From the bottom up: a package may import from its own layer's packages and the layers below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "units", "clock", "plainjson", "backoff", "config", "access_keys", "shapes"),
    ("jobs", "parsing", "cloudwatch", "rules", "debug"),
    ("store",),
    ("read",),
    ("runtime",),
    ("api", "report"),
    ("sdk", "server", "demo", "tuning"),
    ("cli", "__main__"),
)

# Inside a package, its folders' own layers, from the bottom up (a module of the package's own, such as
# runtime/retry.py, by its name).
INNER_LAYERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "runtime": (("retry", "processes", "contract", "containers"), ("capture", "watch"), ("job",), ("launchers",)),
}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its ``__init__``'s)."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: Iterable[str]) -> Iterator[tuple[str, int]]:
    """The package's modules that ``name`` imports, anywhere in it, with the line of each."""
    known = set(known)
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _known(alias.name, known, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if not module.startswith(PACKAGE):
                continue
            for alias in node.names:
                if f"{module}.{alias.name}" in known:  # a module imported by name: `from . import capture`
                    yield f"{module}.{alias.name}", node.lineno
                else:
                    yield from _known(module, known, node.lineno)


def _known(module: str, known: set[str], line: int) -> Iterator[tuple[str, int]]:
    while module and module not in known:  # `import a.b.c` of a function's name: its module
        module = module.rpartition(".")[0]
    if module.startswith(PACKAGE):
        yield module, line


def graph(found: dict[str, Path]) -> dict[str, dict[str, int]]:
    edges: dict[str, dict[str, int]] = defaultdict(dict)
    for name, path in found.items():
        for target, line in imports(name, path, found):
            if target != name and not _is_parent(target, name):
                edges[name].setdefault(target, line)
    return edges


def _is_parent(package: str, module: str) -> bool:
    """Importing a module runs its packages' ``__init__`` anyway: those imports are no arrow."""
    return module.startswith(package + ".")


def circles(edges: dict[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    nodes = set(edges) | {target for targets in edges.values() for target in targets}
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.append(member)
                        if member == node:
                            break
                    if len(part) > 1:
                        found.append(sorted(part))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def collapsed(edges: dict[str, dict[str, int]], depth: int) -> dict[str, set[str]]:
    """The imports between packages of ``depth`` names (``trainmon.runtime`` is 2): each module
    counted as the package that holds it at that depth."""
    def at(name: str) -> str:
        return ".".join(name.split(".")[:depth])

    packages: dict[str, set[str]] = defaultdict(set)
    for source, targets in edges.items():
        for target in targets:
            if at(source) != at(target) and not _is_parent(at(target), at(source)) \
                    and not _is_parent(at(source), at(target)):
                packages[at(source)].add(at(target))
    return packages


def layer(name: str) -> int | None:
    top = name.split(".")[1] if "." in name else None
    return next((level for level, names in enumerate(LAYERS) if top in names), None)


def inner_layer(name: str) -> tuple[str, int] | None:
    """The package of INNER_LAYERS that holds ``name`` and the layer of ``name`` in it."""
    parts = name.split(".")
    if len(parts) < 3 or parts[1] not in INNER_LAYERS:
        return None
    level = next((level for level, names in enumerate(INNER_LAYERS[parts[1]]) if parts[2] in names), None)
    return (parts[1], level) if level is not None else None


def problems(root: Path = ROOT) -> list[str]:
    found = modules(root)
    edges = graph(found)
    said = []
    for part in circles(edges):
        said.append("modules in a circle: " + ", ".join(part))
    deepest = max(name.count(".") for name in found) + 1
    for depth in range(2, deepest):
        for part in circles(collapsed(edges, depth)):
            if any(_is_parent(member, name) for member in part for name in found):  # not a circle of modules
                said.append(f"packages in a circle: {', '.join(part)}")
    for name, path in found.items():
        if layer(name) is None and name != PACKAGE:
            said.append(f"{name} is in no layer: give its package one in scripts/check_structure.py")
        inner = inner_layer(name)
        if inner is None and name.count(".") >= 2 and name.split(".")[1] in INNER_LAYERS:
            said.append(f"{name} is in no layer of {name.split('.')[1]}/: give it one in scripts/check_structure.py")
        for target, line in edges.get(name, {}).items():
            if name != PACKAGE and (layer(target) or 0) > (layer(name) or 0):
                said.append(f"{path.relative_to(root.parent)}:{line}: {name} imports {target}, a layer above")
            other = inner_layer(target)
            if inner is not None and other is not None and other[0] == inner[0] and other[1] > inner[1]:
                said.append(f"{path.relative_to(root.parent)}:{line}: {name} imports {target}, a layer above "
                            f"within {inner[0]}/")
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            said.append(f"{path.relative_to(root.parent)}: {lines} lines, over {MAX_LINES}")
    folders: dict[Path, int] = defaultdict(int)
    for path in found.values():
        if path.name != "__init__.py":
            folders[path.parent] += 1
    for folder, count in sorted(folders.items()):
        if count > MAX_MODULES:
            said.append(f"{folder.relative_to(root.parent)}/: {count} modules, over {MAX_MODULES}")
    return sorted(set(said), key=said.index)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", action="store_true", help="print the imports between top-level packages too")
    args = parser.parse_args()
    if args.graph:
        for source, targets in sorted(collapsed(graph(modules()), 2).items()):
            print(f"{source} -> {', '.join(sorted(targets))}")
    said = problems()
    for line in said:
        print(line)
    return 1 if said else 0


if __name__ == "__main__":
    sys.exit(main())
