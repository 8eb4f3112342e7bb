"""The layers' imports go one way and in no circle: server -> compat and engine; compat knows
only the wire; engine never knows HTTP, JSON or Litestar. Every import counts, those inside
functions and under TYPE_CHECKING too."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "server", "compat", "corpus")


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            name = ".".join(("rose_embed", *path.relative_to(REPO).with_suffix("").parts))
            modules[name.removesuffix(".__init__")] = path
    return modules


def _imports(path: Path) -> set[str]:
    """Every module the file names in an import, as written (`from a.b import c` gives a.b and a.b.c)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {other for other in _imports(path) if other in modules and other != name}
            for name, path in modules.items()}


def test_no_module_imports_itself_in_a_circle():
    graph = _graph()
    cycles, state = [], {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for other in sorted(graph[name]):
            if state.get(other) == "open":
                cycles.append(trail[trail.index(other):] + [name, other] if other in trail else [name, other])
            elif other not in state:
                visit(other, trail + [name])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert not cycles, cycles


def test_imports_go_one_way():
    for name, path in _modules().items():
        imported = _imports(path)
        top = {i.removeprefix("rose_embed.").split(".")[0] for i in imported}
        if name.startswith("rose_embed.engine"):
            assert not top & {"server", "compat", "litestar", "uvicorn"}, (name, top)
        if name.startswith("rose_embed.compat"):
            assert not top & {"engine", "server", "torch"}, (name, top)


def test_every_import_names_the_installed_package():
    """The folders install under one name (pyproject.toml's package-dir): code that imported
    `server` or `engine` by their folder names would work in a checkout and break once installed."""
    folders = {"server", "engine", "compat", "corpus"}
    for top in (*PACKAGES, "rose_embed", "tests", "bench"):
        for path in (REPO / top).rglob("*.py"):
            stray = {name for name in _imports(path) if name.split(".")[0] in folders}
            assert not stray, (path.relative_to(REPO), sorted(stray))
