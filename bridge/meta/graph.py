"""The table graph: lineage edges (source -> sink, by job), cycle check, closures, rendering.

Pure functions over a list of edges; the store loads the edges and calls these.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence

from bridge.meta.models import LineageEdge, LineageNode

MAX_TREE_DEPTH = 64

Adjacency = dict[str, dict[str, list[str]]]  # table -> neighbour -> job ids


def adjacency(edges: Iterable[LineageEdge], *, reverse: bool = False) -> Adjacency:
    adj: Adjacency = defaultdict(lambda: defaultdict(list))
    for e in edges:
        a, b = (e.sink, e.source) if reverse else (e.source, e.sink)
        jobs = adj[a][b]
        if e.job_id not in jobs:
            jobs.append(e.job_id)
    return adj


def find_cycle(
    edges: Iterable[tuple[str, str]], new_edges: Sequence[tuple[str, str]]
) -> list[str] | None:
    """The path of a cycle that ``new_edges`` would close, e.g. ``[a, b, c, a]``, else None.

    The existing graph is acyclic (every registration was checked), so a cycle
    must use a new edge (s -> t): it exists iff s is reachable from t.
    """
    graph: dict[str, set[str]] = defaultdict(set)
    for s, t in edges:
        graph[s].add(t)
    for s, t in new_edges:
        graph[s].add(t)
    for s, t in new_edges:
        path = _path(graph, t, s)
        if path is not None:
            return [s, *path]
    return None


def _path(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """Shortest path start -> goal (BFS), inclusive of both ends."""
    parent: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while (p := parent[path[-1]]) is not None:
                path.append(p)
            return path[::-1]
        for nxt in sorted(graph.get(node, ())):
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return None


def reachable(adj: Adjacency, start: str) -> set[str]:
    """Tables reachable from ``start`` (excluding it)."""
    seen: set[str] = set()
    stack = [start]
    while stack:
        for nxt in adj.get(stack.pop(), {}):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    seen.discard(start)
    return seen


def upstream(edges: Sequence[LineageEdge], table: str) -> set[str]:
    return reachable(adjacency(edges, reverse=True), table)


def downstream(edges: Sequence[LineageEdge], table: str) -> set[str]:
    return reachable(adjacency(edges), table)


def between(edges: Sequence[LineageEdge], tables: Sequence[str]) -> set[str]:
    """Tables on some path from one listed table to another (listed ones excluded).

    A consistent read of {T0, T2} with T0 -> T1 -> T2 must also wait for T1:
    T2's barrier B only means something if T1 completed B too.
    """
    fwd, back = adjacency(edges), adjacency(edges, reverse=True)
    listed = set(tables)
    below: set[str] = set()
    above: set[str] = set()
    for t in listed:
        below |= reachable(fwd, t)
        above |= reachable(back, t)
    return (below & above) - listed


def lineage_tree(adj: Adjacency, table: str) -> list[LineageNode]:
    """Children of ``table`` in ``adj`` as nested nodes (a DAG is unfolded into a tree)."""

    def build(node: str, depth: int, on_path: frozenset[str]) -> list[LineageNode]:
        if depth >= MAX_TREE_DEPTH:
            return []
        out = []
        for nxt, jobs in sorted(adj.get(node, {}).items()):
            if nxt in on_path:  # never happens in an acyclic graph; guards the recursion
                continue
            out.append(
                LineageNode(table=nxt, jobs=jobs, children=build(nxt, depth + 1, on_path | {nxt}))
            )
        return out

    return build(table, 0, frozenset({table}))


def render_tree(table: str, upstream: list[LineageNode], downstream: list[LineageNode]) -> str:
    lines = [table]
    sections = [("upstream (reads from)", upstream), ("downstream (feeds)", downstream)]
    for i, (title, nodes) in enumerate(sections):
        last = i == len(sections) - 1
        lines.append(("└── " if last else "├── ") + title)
        _render_nodes(nodes, "    " if last else "│   ", lines)
    return "\n".join(lines)


def _render_nodes(nodes: list[LineageNode], prefix: str, lines: list[str]) -> None:
    if not nodes:
        lines.append(prefix + "└── (none)")
    for i, node in enumerate(nodes):
        last = i == len(nodes) - 1
        lines.append(f"{prefix}{'└── ' if last else '├── '}{node.table}  [{', '.join(node.jobs)}]")
        if node.children:
            _render_nodes(node.children, prefix + ("    " if last else "│   "), lines)


def render_mermaid(edges: Sequence[LineageEdge], focus: str | None = None) -> str:
    """A Mermaid flowchart of ``edges``; ``focus`` is highlighted."""
    names = sorted(
        {e.source for e in edges} | {e.sink for e in edges} | ({focus} if focus else set())
    )
    ids = {name: f"t{i}_{re.sub(r'[^A-Za-z0-9_]', '_', name)}" for i, name in enumerate(names)}
    lines = ["flowchart LR"]
    lines += [f'    {ids[n]}["{n}"]' for n in names]
    pairs: dict[tuple[str, str], list[str]] = defaultdict(list)
    for e in edges:
        pairs[(e.source, e.sink)].append(e.job_id)
    for (s, t), jobs in sorted(pairs.items()):
        label = ", ".join(sorted(set(jobs))).replace('"', "'")
        lines.append(f'    {ids[s]} -->|"{label}"| {ids[t]}')
    if focus:
        lines.append(f"    style {ids[focus]} stroke-width:3px")
    return "\n".join(lines)


def edges_touching(edges: Sequence[LineageEdge], tables: set[str]) -> list[LineageEdge]:
    return [e for e in edges if e.source in tables and e.sink in tables]


def components(edges: Sequence[LineageEdge], tables: Iterable[str]) -> list[list[str]]:
    """Table groups: the connected components of the lineage graph (edges taken both ways),
    each sorted; ``tables`` without edges form groups of their own. Sorted by first member."""
    neighbours: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        neighbours[e.source].add(e.sink)
        neighbours[e.sink].add(e.source)
    nodes = set(tables) | set(neighbours)
    seen: set[str] = set()
    groups = []
    for start in sorted(nodes):
        if start in seen:
            continue
        seen.add(start)
        members, stack = [start], [start]
        while stack:
            for nxt in neighbours.get(stack.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    members.append(nxt)
                    stack.append(nxt)
        groups.append(sorted(members))
    return groups


def depths(edges: Sequence[LineageEdge]) -> dict[str, int]:
    """Lineage depth of every table on an edge: 0 for a root, else 1 + its deepest source
    (the longest path from a root), so sorting by depth lists a group in lineage order."""
    down = adjacency(edges)
    indegree: dict[str, int] = defaultdict(int)
    for source, sinks in down.items():
        indegree[source] += 0
        for sink in sinks:
            indegree[sink] += 1
    # Kahn's topological order; registration refuses cycles, a table on one would stay 0.
    ready = deque(sorted(t for t, n in indegree.items() if n == 0))
    depth = dict.fromkeys(indegree, 0)
    while ready:
        table = ready.popleft()
        for sink in down.get(table, {}):
            depth[sink] = max(depth[sink], depth[table] + 1)
            indegree[sink] -= 1
            if indegree[sink] == 0:
                ready.append(sink)
    return depth


def group_name(members: Sequence[str], depth: dict[str, int]) -> str:
    """A group is named after its root (source) tables, joined by ``+``."""
    roots = [t for t in members if depth.get(t, 0) == 0]
    return "+".join(sorted(roots or members))
