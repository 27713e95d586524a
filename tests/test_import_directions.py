"""The import directions docs/architecture.md promises, read from the modules' own imports.

- filestore and logstore never import bridge, nor each other;
- each part of bridge imports, within bridge, only what its docstring's
  ``Imports within bridge:`` line names (the line is the rule; this test holds it);
- each room of a roomed package (``bridge.spark.read``) imports, of its package, only
  what its face's ``Imports within <package>:`` line names, and a room's private module
  (``_tasks``) only from within the room;
- no cycle among module-level imports; no module over 500 lines.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.module_imports import MODULES, PACKAGES, ROOT
from tests.module_imports import imports as _imports

MAX_LINES = 500
ROOMED = ["bridge.spark", "filestore"]  # packages grouped into rooms (sub-packages) by role
RULE = re.compile(r"Imports within bridge: ([^\n]+?)\.\n")


def _part(module: str) -> str:
    """The unit of the bridge's rules: a subpackage (bridge.spark) or a top module."""
    return ".".join(module.split(".")[:2])


def _rule(part: str) -> set[str]:
    path = MODULES[part]
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    match = RULE.search(docstring + "\n")
    assert match, f"{path}: the docstring has no 'Imports within bridge: ...' line"
    listed = match.group(1).strip()
    return set() if listed == "nothing" else {p.strip() for p in listed.split(",")}


@pytest.mark.parametrize("package", ["filestore", "logstore"])
def test_a_store_imports_no_other_package_of_the_project(package: str) -> None:
    others = set(PACKAGES) - {package}
    wrong = {
        (module, imported)
        for module in MODULES
        if module.split(".")[0] == package
        for imported in _imports(module, top_level_only=False)
        if imported.split(".")[0] in others
    }
    assert not wrong, sorted(wrong)


def test_each_part_of_bridge_imports_only_what_its_docstring_names() -> None:
    parts = sorted({_part(m) for m in MODULES if m.startswith("bridge.")})
    assert {"bridge.spark", "bridge.worker", "bridge.meta", "bridge.tables"} <= set(parts)
    wrong = []
    for part in parts:
        if part == "bridge":  # the package's lazy user-facing exports
            continue
        allowed = _rule(part)
        for module in (m for m in MODULES if _part(m) == part):
            for imported in _imports(module, top_level_only=False):
                target = _part(imported)
                if target.startswith("bridge.") and target != part and target not in allowed:
                    wrong.append(f"{module} imports {imported} ({part} may import {allowed})")
    assert not wrong, "\n".join(wrong)


def test_the_rules_form_layers_no_two_parts_of_bridge_allow_each_other() -> None:
    parts = {_part(m) for m in MODULES if m.startswith("bridge.")} - {"bridge"}
    rules = {part: _rule(part) for part in parts}
    unknown = {(p, t) for p, allowed in rules.items() for t in allowed if t not in parts}
    assert not unknown, f"a rule names a part that does not exist: {sorted(unknown)}"
    assert not _cycles(rules), _cycles(rules)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by a depth-first search (one path per back edge)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_no_import_cycle_among_modules() -> None:
    graph = {
        module: {m for m in _imports(module, top_level_only=True) if m in MODULES and m != module}
        for module in MODULES
    }
    # a package's __init__ importing its own submodules is a re-export, not a cycle
    for module, targets in graph.items():
        graph[module] = {
            t
            for t in targets
            if not (MODULES[t].name == "__init__.py" and module.startswith(f"{t}."))
        }
    assert not _cycles(graph), _cycles(graph)


def test_no_module_over_500_lines() -> None:
    """The product's packages and the programs beside them (benchmarks, examples, the
    dashboards' builder); not the tests (one Debezium type matrix is 514 lines)."""
    programs = [p for d in ("bench", "examples", "monitoring") for p in (ROOT / d).rglob("*.py")]
    # not the venvs the benchmarks create beside them (bench/.venv-peers, .venv-spark-paimon)
    mine = [p for p in programs if not any(part.startswith(".venv") for part in p.parts)]
    paths = [*MODULES.values(), *mine]
    long = {
        str(p.relative_to(ROOT)): n
        for p in paths
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, long


def test_the_rules_catch_a_wrong_import() -> None:
    """The checks themselves: a cycle is found, and a rule line is read as written."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    assert _rule("bridge.worker") == {"bridge.errors", "bridge.meta", "bridge.tables"}
    assert "bridge.spark" not in _rule("bridge.worker")


def test_no_private_name_is_imported_from_another_package() -> None:
    """A seam between packages is public: `from filestore.read.split import _helper` in bridge
    would tie bridge to filestore's insides."""
    wrong = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            other = node.module.split(".")[0] != module.split(".")[0]
            if other and node.module.split(".")[0] in PACKAGES:
                wrong += [
                    f"{module}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
    assert not wrong, wrong


def test_the_readmes_code_map_lists_every_part_of_bridge_with_its_rule() -> None:
    """The README's code map (one row per package, part of bridge and room) says what each part
    may import within bridge: the same as the part's docstring, so neither drifts."""
    text = (ROOT / "README.md").read_text()
    rows = text.split("<!-- code-map:begin -->")[1].split("<!-- code-map:end -->")[0]
    listed: dict[str, set[str]] = {}
    for line in [r for r in rows.splitlines() if r.startswith("|")][2:]:  # past the header
        name, _, imports = (cell.strip() for cell in line.strip("|").split("|"))
        words = set(re.findall(r"`([\w.]+)`", imports))
        listed[name.strip("`")] = words
    parts = {_part(m) for m in MODULES if m.startswith("bridge.")} - {"bridge"}
    rooms = {room: package for package in ROOMED for room in _rooms(package)}
    expected = {*PACKAGES, *parts, *rooms} - {"bridge"}
    assert set(listed) == expected, f"listed but absent, or missing: {set(listed) ^ expected}"
    rules = {p: _rule(p) for p in parts}
    rules |= {room: {f"{pkg}.{unit}" for unit in _room_rule(room)} for room, pkg in rooms.items()}
    wrong = {p: (listed[p], rule) for p, rule in rules.items() if listed[p] != rule}
    assert not wrong, f"README code map != docstring rule: {wrong}"


def _rooms(package: str) -> list[str]:
    """The rooms of a package: its sub-packages (``bridge.spark.read``)."""
    return sorted(
        m for m, p in MODULES.items() if p.name == "__init__.py" and m.rpartition(".")[0] == package
    )


def _room_rule(room: str) -> set[str]:
    """What a room may import of its package, from its face's ``Imports within <package>:``."""
    package, _, _ = room.rpartition(".")
    docstring = ast.get_docstring(ast.parse(MODULES[room].read_text())) or ""
    match = re.search(rf"Imports within {re.escape(package)}: ([^\n]+?)\.\n", docstring + "\n")
    assert match, f"{MODULES[room]}: the docstring has no 'Imports within {package}: ...' line"
    listed = match.group(1).strip()
    return set() if listed == "nothing" else {p.strip() for p in listed.split(",")}


def _unit(module: str, package: str) -> str:
    """The unit of a package's room rules: a room or a module at the package's top
    (``bridge.spark.read.scan`` -> ``read``, ``bridge.spark.errors`` -> ``errors``)."""
    return module.removeprefix(f"{package}.").split(".")[0]


@pytest.mark.parametrize("package", ROOMED)
def test_each_room_imports_of_its_package_only_what_its_face_names(package: str) -> None:
    rooms = _rooms(package)
    assert len(rooms) >= 3, rooms
    wrong = []
    for room in rooms:
        allowed = _room_rule(room)
        here = _unit(room, package)
        for module in (m for m in MODULES if m == room or m.startswith(f"{room}.")):
            for imported in _imports(module, top_level_only=False):
                if not imported.startswith(f"{package}."):
                    continue
                target = _unit(imported, package)
                if target != here and target not in allowed:
                    wrong.append(f"{module} imports {imported} ({here} may import {allowed})")
    assert not wrong, "\n".join(wrong)
    rules = {_unit(room, package): _room_rule(room) for room in rooms}
    assert not _cycles(rules), _cycles(rules)


@pytest.mark.parametrize("package", ROOMED)
def test_a_rooms_private_module_is_imported_only_within_its_room(package: str) -> None:
    """``bridge.spark.write._tasks`` serves the room ``write`` alone; a name without the
    underscore is what the room offers the rest of the package."""
    wrong = []
    for private in (m for m in MODULES if m.startswith(f"{package}.")):
        if not private.rpartition(".")[2].startswith("_"):
            continue
        room = private.rpartition(".")[0]
        for module in MODULES:
            inside = module == room or module.startswith(f"{room}.")
            if not inside and private in set(_imports(module, top_level_only=False)):
                wrong.append(f"{module} imports {private}, private to {room}")
    assert not wrong, "\n".join(wrong)
