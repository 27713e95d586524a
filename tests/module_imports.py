"""What the project's modules import, read from their source (ast), never by importing them.

One reader for the tests that hold the imports to a rule: the layers between the packages
(tests/test_import_directions.py) and the distributions each install extra declares
(tests/test_dependencies.py).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("filestore", "logstore", "bridge")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(module: str, top_level_only: bool) -> Iterator[str]:
    """The modules ``module`` imports: all of them, or only those a plain ``import module``
    runs (neither inside a function nor under TYPE_CHECKING). ``from pkg import name`` yields
    ``pkg`` and, when it is one of the project's modules, ``pkg.name``."""
    tree = ast.parse(MODULES[module].read_text())
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if top_level_only and (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            or (isinstance(node, ast.If) and is_type_checking(node))
        ):
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            # `from bridge.spark import options` imports the module bridge.spark.options
            yield from (f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES)
        stack.extend(ast.iter_child_nodes(node))


def project_module(name: str) -> str | None:
    """The project module an import of ``name`` loads (``filestore.errors.X`` ->
    ``filestore.errors``), or None when ``name`` is not the project's."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def third_party_imports(
    roots: Iterable[str], follow_functions: Iterable[str] = ()
) -> tuple[set[str], dict[str, set[str]]]:
    """What importing ``roots`` loads: (the project modules, {top-level name of every other
    non-stdlib module: the project modules importing it}). Imports inside functions count
    only in ``follow_functions`` (a command's function imports what the command runs)."""
    functions = set(follow_functions)
    seen: set[str] = set()
    outside: dict[str, set[str]] = {}
    todo = [*roots, *functions]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # its packages run first
        for name in imports(module, top_level_only=module not in functions):
            top = name.split(".")[0]
            if top in PACKAGES:
                if (target := project_module(name)) is not None:
                    todo.append(target)
            elif top and top not in sys.stdlib_module_names:
                outside.setdefault(top, set()).add(module)
    return seen, outside
