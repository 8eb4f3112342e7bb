"""The layers' imports go one way and in no circle, and the folders are the layers (docs/design.md).

server -> compat and engine; compat knows only the wire; engine never knows HTTP, JSON or
Litestar. Inside engine: the front end reaches the engines only through the contract package
(engine/contract/) and the model's files, text and images; ROSE imports nothing of the queue, the server
or the contract's process plumbing. Every import counts, those inside functions and under
TYPE_CHECKING too."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "server", "compat", "corpus")

ENGINE = "rose_embed.engine"
# What every side may import of the engine: the contract between the sides, and the model's files,
# text and images (no torch). These import nothing of the queue, ROSE or the server in turn, so that a front end
# that imports them never reaches an engine's insides.
SHARED = (f"{ENGINE}.contract", f"{ENGINE}.model_files", f"{ENGINE}.text", f"{ENGINE}.image")
# The server's parts that run an engine or start one, and may import any of it: the command line
# (it checks flags against ROSE's support tables before anything starts) and the processes (the
# supervisor starts engine processes; in_process_engine.py serves an `Engine` object in a thread).
ENGINE_HOSTS = ("rose_embed.server.cli", "rose_embed.server.processes")
# The contract's data, which ROSE computes on; the rest of the contract is process plumbing.
ROSE_MAY_USE = {f"{ENGINE}.contract.config", f"{ENGINE}.contract.batch", f"{ENGINE}.contract.cpu_quota"}


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


def _within(name: str, *packages: str) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


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


def test_the_front_end_reaches_engines_only_through_the_contract():
    """Routes, pipeline, links, HTTP plumbing, metrics, the app and its runtime: of the engine, only
    the contract and the model's files and text; and those import nothing of the queue or ROSE."""
    engine_reaches = []
    for name, path in _modules().items():
        imported = {i for i in _imports(path) if _within(i, ENGINE) and i != ENGINE}
        if _within(name, "rose_embed.server") and not _within(name, *ENGINE_HOSTS):
            engine_reaches += [(name, i) for i in imported if not _within(i, *SHARED)]
        if _within(name, *SHARED):
            engine_reaches += [(name, i) for i in imported if not _within(i, *SHARED)]
    assert not engine_reaches, engine_reaches


def test_rose_imports_nothing_of_the_queue_the_server_or_the_process_plumbing():
    strays = []
    for name, path in _modules().items():
        if _within(name, f"{ENGINE}.rose"):
            strays += [(name, i) for i in _imports(path)
                       if _within(i, f"{ENGINE}.queue", "rose_embed.server", "rose_embed.compat")
                       or (_within(i, f"{ENGINE}.contract") and i != f"{ENGINE}.contract" and not _within(i, *ROSE_MAY_USE))]
    assert not strays, strays


def test_every_package_says_which_process_runs_it():
    """Each package's docstring names the process (or processes) that run its files."""
    words = ("runs in", "runs where", "imported by every")
    for init in [path for package in PACKAGES for path in (REPO / package).rglob("__init__.py")]:
        doc = (ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or "").lower()
        assert any(word in " ".join(doc.split()) for word in words), init.relative_to(REPO)


def test_every_import_names_the_installed_package():
    """The folders install under one name (pyproject.toml's package-dir): code that imported
    `server` or `engine` by their folder names would work in a checkout and break once installed."""
    folders = {"server", "engine", "compat", "corpus"}
    for top in (*PACKAGES, "rose_embed", "tests", "bench"):
        for path in (REPO / top).rglob("*.py"):
            stray = {name for name in _imports(path) if name.split(".")[0] in folders}
            assert not stray, (path.relative_to(REPO), sorted(stray))
