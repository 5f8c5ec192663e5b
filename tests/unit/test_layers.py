"""The layers of docs/architecture.md, read from every import in the tree, lazy ones included.

A module may import its own layer and those below it, never one above; no two modules import
each other, however indirectly; the CLI's skin (``dtune.commands``) is imported by the CLI
alone; the tool never imports the lab (``dtune_lab``); no private name crosses a package;
and an import inside a function says on its line why it is there (start-up time, an optional
package), or it belongs at the top of the module.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from support.paths import REPO

# Lowest first. A module takes the layer of its longest matching prefix ("dtune" itself, the
# package's facade, only the package: ``dtune.get``).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("dtune.version", "dtune.errors", "dtune.argtypes", "dtune.checksums", "dtune.config", "dtune.dataset",
              "dtune.fileio", "dtune.loop", "dtune.params", "dtune.stats", "dtune.units", "dtune.tomlfile",
              "dtune.procgroup", "dtune.netfacts", "dtune.accounting", "dtune.energy", "dtune.serveproc",
              "dtune.statedir", "dtune.lazynames")),
    ("http", ("dtune.http", "dtune.netprobe")),
    ("decisions", ("dtune.model", "dtune.tuners")),
    ("engine", ("dtune.engine",)),
    ("sources and records", ("dtune.discovery", "dtune.history")),
    ("options", ("dtune.options",)),
    ("transfer", ("dtune.transfer", "dtune.upload")),
    ("cluster", ("dtune.cluster",)),
    ("front ends", ("dtune", "dtune.api", "dtune.fsspec", "dtune.pooch", "dtune.cli", "dtune.__main__",
                    "dtune.commands", "dtune.plugins", "dtune.server", "dtune.history.cli", "dtune.model.cli")),
    ("lab", ("dtune_lab",)),
]
ROOTS = [REPO / "src", REPO / "lab" / "src"]


@dataclass(frozen=True)
class Import:
    importer: str
    target: str          # the module imported (a ``from pkg import sub`` of a submodule: pkg.sub)
    names: tuple[str, ...]
    line: int
    text: str
    lazy: bool           # inside a function


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for root in ROOTS:
        if root.is_dir():
            for path in root.rglob("*.py"):
                found[module_name(root, path)] = path
    return found


def resolve(importer: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = importer.split(".") if path.name == "__init__.py" else importer.split(".")[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(known: dict[str, Path]) -> list[Import]:
    out = []
    for name, path in known.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        lazy_nodes = {id(n) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                      for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            line = lines[node.lineno - 1] if hasattr(node, "lineno") else ""
            lazy = id(node) in lazy_nodes
            if isinstance(node, ast.Import):
                for alias in node.names:
                    out.append(Import(name, alias.name, (), node.lineno, line, lazy))
            elif isinstance(node, ast.ImportFrom):
                target = resolve(name, path, node)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in known:
                        out.append(Import(name, sub, (), node.lineno, line, lazy))
                    else:
                        out.append(Import(name, target, (alias.name,), node.lineno, line, lazy))
    return [i for i in out if i.target.split(".")[0] in ("dtune", "dtune_lab") or i.lazy]


def layer_of(module: str) -> int:
    best, length = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            below = module.startswith(prefix + ".") and prefix != "dtune"
            if (module == prefix or below) and len(prefix) > length:
                best, length = index, len(prefix)
    return best


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


KNOWN = modules()
IMPORTS = imports(KNOWN)
INTERNAL = [i for i in IMPORTS if i.target.split(".")[0] in ("dtune", "dtune_lab")]


def test_the_tree_is_read() -> None:
    # (a test that read nothing would pass every rule below)
    assert len(KNOWN) > 150 and len(INTERNAL) > 500
    assert any(i.lazy for i in INTERNAL)


def test_every_module_has_a_layer() -> None:
    assert [m for m in KNOWN if layer_of(m) < 0] == []


def test_no_import_goes_up_a_layer() -> None:
    wrong = [f"{i.importer} ({LAYERS[layer_of(i.importer)][0]}) imports {i.target} "
             f"({LAYERS[layer_of(i.target)][0]}), line {i.line}"
             for i in INTERNAL if i.target in KNOWN and layer_of(i.target) > layer_of(i.importer)]
    assert wrong == []


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_cycles_finds_a_circle_and_only_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle() -> None:
    edges: dict[str, set[str]] = {}
    for i in INTERNAL:
        if i.target in KNOWN and i.target != i.importer:
            # a package's own __init__ is not a dependency of its submodules' siblings
            if i.importer.startswith(i.target + "."):
                continue
            edges.setdefault(i.importer, set()).add(i.target)
    assert cycles(edges) == []


def test_only_the_cli_imports_its_skin() -> None:
    wrong = [f"{i.importer} imports {i.target}" for i in INTERNAL
             if i.target.startswith("dtune.commands")
             and not i.importer.startswith(("dtune.commands", "dtune.cli"))]
    assert wrong == []


def test_the_tool_never_imports_the_lab() -> None:
    assert [f"{i.importer}:{i.line}" for i in INTERNAL
            if i.importer.startswith("dtune.") and i.target.startswith("dtune_lab")] == []


def test_no_private_name_crosses_a_package() -> None:
    wrong = []
    for i in INTERNAL:
        privates = [n for n in i.names if n.startswith("_") and not n.startswith("__")]
        crossing = package_of(i.importer) != package_of(i.target)
        private_module = any(part.startswith("_") and not part.startswith("__") for part in i.target.split("."))
        if crossing and (privates or private_module):
            wrong.append(f"{i.importer}:{i.line} imports {i.target} {privates}")
    assert wrong == []


def test_an_import_inside_a_function_says_why() -> None:
    wrong = [f"{KNOWN[i.importer].relative_to(REPO)}:{i.line}: {i.text.strip()}"
             for i in IMPORTS if i.lazy and "#" not in i.text]
    assert wrong == []
