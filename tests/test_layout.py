"""The library's layout rules, read from the source: module sizes, the import graph, private modules and names.

* **Size**: no Python module under ``portfed/`` or ``benchmarks/`` over :data:`MAX_LINES` lines.
* **No import cycle** among portfed's modules.  The graph is read with :mod:`ast` (relative imports
  resolved) from the imports that run when a module is imported: those at module level, including
  under a module-level ``if`` / ``try`` and in class bodies.  Imports inside functions (deferred on
  purpose) and under ``if TYPE_CHECKING:`` (never run) are left out.  Importing ``a.b.c`` also runs
  the ``__init__`` of every package on the way, so an import adds an edge to the imported module and
  to each of its enclosing packages that does not also enclose the importer (a module's own packages
  are already being imported when it runs).  ``from P import x`` is an edge to ``P.x`` when that is a
  module, else to ``P``.
* **Private stays private**: a private module (``_name.py``, or a ``_name`` package) belongs to the
  package that holds it and may be imported from anywhere inside that package, sub-packages included
  — so the top-level ``portfed/_io.py``, ``portfed/_crash.py`` … are the whole library's shared
  helpers, importable from every sub-package.  A private name (``_name``) of a module may be imported
  only by a module of the same package (the package is the unit of privacy; a sub-package is
  another package).  Checked for the modules of ``portfed/`` and the scripts of ``benchmarks/``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "portfed"
MAX_LINES = 400


def python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def oversized(paths: list[Path], root: Path = ROOT) -> dict[str, int]:
    """``{path relative to root: lines}`` of the modules over :data:`MAX_LINES` lines."""
    return {p.relative_to(root).as_posix(): n for p in paths if (n := line_count(p)) > MAX_LINES}


# ---------------------------------------------------------------------------------------------- the graph
def module_name(path: Path, root: Path = ROOT) -> str:
    """``portfed/agents/batched.py`` → ``portfed.agents.batched``; a package's ``__init__.py`` → the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str, is_package: bool) -> str:
    """The package a module belongs to: a package's ``__init__`` belongs to the package itself."""
    return module if is_package else module.rpartition(".")[0]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_time_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is imported (module doc)."""
    stack: list[ast.AST] = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(reversed(node.orelse))
        else:
            stack.extend(reversed([c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)]))


def resolve_from(node: ast.ImportFrom, package: str) -> str:
    """The absolute module of ``from … import``: ``level`` dots climb from the importer's ``package``."""
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


class Modules:
    """The modules under ``root/top`` by name, whether each is a package, and its parsed source."""

    def __init__(self, top: str = "portfed", root: Path = ROOT) -> None:
        self.root = root
        self.paths = {module_name(p, root): p for p in sorted((root / top).rglob("*.py"))
                      if "__pycache__" not in p.parts}
        self.packages = {name for name, p in self.paths.items() if p.name == "__init__.py"}

    def package(self, module: str) -> str:
        return package_of(module, module in self.packages)

    def imports(self, module: str) -> Iterator[tuple[int, str, str | None]]:
        """``(line, imported module, imported name or None)`` of each import-time import of ``module``
        (``from P import x`` of a module ``P.x`` gives ``(line, "P.x", None)``)."""
        tree = ast.parse(self.paths[module].read_text(encoding="utf-8"))
        for node in import_time_imports(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield node.lineno, alias.name, None
                continue
            source = resolve_from(node, self.package(module))
            for alias in node.names:
                full = f"{source}.{alias.name}"
                yield (node.lineno, full, None) if full in self.paths else (node.lineno, source, alias.name)

    def graph(self) -> dict[str, set[str]]:
        """Each module's import-time dependencies among these modules (module doc)."""
        edges: dict[str, set[str]] = {name: set() for name in self.paths}
        for module in self.paths:
            own = self.package(module).split(".")
            own_packages = {".".join(own[:i]) for i in range(1, len(own) + 1)}
            for _, target, _ in self.imports(module):
                if target not in self.paths:
                    continue
                parts = target.split(".")
                enclosing = {".".join(parts[:i]) for i in range(1, len(parts))} & self.paths.keys()
                edges[module] |= {target} | (enclosing - own_packages)
            edges[module].discard(module)
        return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(start: str) -> None:  # iterative, so that a long chain cannot reach the recursion limit
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def privacy_violations(modules: Modules, importers: dict[str, str]) -> list[str]:
    """``path:line: …`` for each import by ``importers`` (``{module: its package}``) of a private module
    from outside the package that holds it, or of a private name from outside its module's package."""
    found = []
    for module, package in importers.items():
        inside = package.split(".")
        enclosing = {".".join(inside[:i]) for i in range(1, len(inside) + 1)} if package else set()
        where = modules.paths[module].relative_to(modules.root).as_posix()
        for line, target, name in modules.imports(module):
            if not target.startswith("portfed"):
                continue
            parts = target.split(".")
            for i, part in enumerate(parts[1:], start=1):
                holder = ".".join(parts[:i])
                if is_private(part) and holder not in enclosing:
                    found.append(f"{where}:{line}: imports {target}, private to package {holder}")
                    break
            owner = modules.package(target)
            if name is not None and is_private(name) and owner != package:
                found.append(f"{where}:{line}: imports {name} of {target}, private to package {owner}")
    return found


# ---------------------------------------------------------------------------------------------- the tests
def test_no_module_is_over_the_size_limit() -> None:
    over = oversized(python_files("portfed", "benchmarks"))
    assert not over, f"modules over {MAX_LINES} lines (split them by concept): {over}"


def test_the_import_graph_of_portfed_has_no_cycle() -> None:
    found = cycles(Modules().graph())
    assert not found, "import cycles among portfed's modules: " + "; ".join(" ↔ ".join(c) for c in found)


def test_no_module_imports_another_packages_private_module_or_name() -> None:
    modules = Modules()
    importers = {name: modules.package(name) for name in modules.paths}
    scripts = Modules("benchmarks")
    modules.paths |= scripts.paths  # the scripts are outside every portfed package
    importers |= dict.fromkeys(scripts.paths, "")
    found = privacy_violations(modules, importers)
    assert not found, "private modules or names imported from outside their package:\n" + "\n".join(found)


# ---------------------------------------------------------------------------------------------- the checks can fail
@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A tiny ``portfed`` package written for a case: ``tree / "portfed" / …``."""
    def write(files: dict[str, str]) -> Path:
        for name, text in files.items():
            path = tmp_path / "portfed" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return tmp_path
    return write  # type: ignore[return-value]


def test_a_cycle_through_relative_imports_is_found(tree) -> None:
    root = tree({"__init__.py": "", "a/__init__.py": "", "a/x.py": "from .y import f\n",
                 "a/y.py": "from portfed.a import x\n"})
    assert cycles(Modules(root=root).graph()) == [["portfed.a.x", "portfed.a.y"]]


def test_a_cycle_through_a_package_init_is_found(tree) -> None:
    root = tree({"__init__.py": "", "a/__init__.py": "from portfed.a.x import f\n",
                 "a/x.py": "from portfed.b.y import g\n", "b/__init__.py": "", "b/y.py": "from portfed.a import h\n"})
    assert cycles(Modules(root=root).graph()) == [["portfed.a", "portfed.a.x", "portfed.b.y"]]


def test_deferred_and_type_checking_imports_make_no_cycle(tree) -> None:
    root = tree({"__init__.py": "", "x.py": "from portfed import y\n",
                 "y.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from portfed import x\n"
                         "def f():\n    from portfed import x\n"})
    assert cycles(Modules(root=root).graph()) == []


def test_a_module_importing_its_own_package_by_name_is_no_cycle(tree) -> None:
    root = tree({"__init__.py": "", "a/__init__.py": "from portfed.a.x import f\n",
                 "a/x.py": "from portfed.a.y import g\n", "a/y.py": ""})
    assert cycles(Modules(root=root).graph()) == []


def test_private_modules_and_names_from_outside_their_package_are_found(tree) -> None:
    root = tree({"__init__.py": "", "_io.py": "def _raw(): ...\n",
                 "a/__init__.py": "", "a/_helpers.py": "", "a/x.py": "_limit = 1\n",
                 "a/y.py": "from portfed._io import atomic\nfrom . import _helpers\nfrom .x import _limit\n",
                 "b/__init__.py": "",
                 "b/z.py": "from portfed.a import _helpers\nimport portfed.a._helpers\nfrom portfed.a.x import _limit\n"
                           "from portfed._io import _raw\n"})
    modules = Modules(root=root)
    found = privacy_violations(modules, {m: modules.package(m) for m in modules.paths})
    assert [f.split(": ", 1)[1] for f in found] == [
        "imports portfed.a._helpers, private to package portfed.a",
        "imports portfed.a._helpers, private to package portfed.a",
        "imports _limit of portfed.a.x, private to package portfed.a",
        "imports _raw of portfed._io, private to package portfed",
    ]
    assert all("b/z.py" in f for f in found)  # portfed.a.y's own imports and portfed._io's public names pass


def test_a_module_over_the_size_limit_is_found(tmp_path: Path) -> None:
    (tmp_path / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "small.py").write_text("x = 1\n" * MAX_LINES)
    assert oversized(sorted(tmp_path.glob("*.py")), root=tmp_path) == {"big.py": MAX_LINES + 1}
