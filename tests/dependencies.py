"""What pyproject.toml declares, as distributions and as the top-level names they import.

``declared(extras)``: the distributions the base and ``extras`` list (following the
project's own ``dynamic-table-storage[...]`` references); ``installed_closure``: those
and everything they require in turn, as installed here (importlib.metadata);
``import_names``: the top-level modules those distributions provide.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import metadata

from packaging.requirements import Requirement

from tests.module_imports import ROOT

PROJECT = "dynamic-table-storage"


def canonical(name: str) -> str:
    """PEP 503's normal form: ``Faust_Streaming`` and ``faust-streaming`` are one name."""
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def project_table() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def extras() -> dict[str, list[str]]:
    optional = project_table()["optional-dependencies"]
    assert isinstance(optional, dict)
    return {canonical(k): list(v) for k, v in optional.items()}


def declared(wanted: Iterable[str]) -> dict[str, set[str]]:
    """{distribution: its extras} the base and the ``wanted`` extras list. KeyError names
    an extra pyproject.toml does not have."""
    optional = extras()
    base = project_table()["dependencies"]
    assert isinstance(base, list)
    todo = list(base)
    done: set[str] = set()
    out: dict[str, set[str]] = {}

    def add(extra: str) -> None:
        if canonical(extra) not in done:
            done.add(canonical(extra))
            todo.extend(optional[canonical(extra)])

    for extra in wanted:
        add(extra)
    while todo:
        req = Requirement(todo.pop())
        if canonical(req.name) == PROJECT:
            for extra in req.extras:
                add(extra)
        else:
            out.setdefault(canonical(req.name), set()).update(req.extras)
    return out


def installed_closure(direct: Mapping[str, set[str]]) -> set[str]:
    """``direct`` and what they require, recursively, per the installed metadata (markers
    evaluated here, with the extras asked for). A requirement not installed is skipped:
    what it would provide cannot be imported anyway."""
    seen: dict[str, set[str]] = {}
    todo = [(name, set(wanted)) for name, wanted in direct.items()]
    while todo:
        name, wanted = todo.pop()
        if name in seen and wanted <= seen[name]:
            continue
        seen.setdefault(name, set()).update(wanted)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is not None and not any(
                req.marker.evaluate({"extra": e}) for e in {"", *wanted}
            ):
                continue
            todo.append((canonical(req.name), set(req.extras)))
    return set(seen)


@cache
def providers() -> dict[str, frozenset[str]]:
    """{top-level import name: the installed distributions providing it}."""
    return {
        name: frozenset(canonical(d) for d in dists)
        for name, dists in metadata.packages_distributions().items()
    }


def import_names(distributions: Iterable[str]) -> set[str]:
    """The top-level modules the installed ``distributions`` provide."""
    wanted = set(distributions)
    return {name for name, dists in providers().items() if dists & wanted}
