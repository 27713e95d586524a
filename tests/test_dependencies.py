"""Each install extra of pyproject.toml declares what its modules import (issue 26: what ships
to a cluster is one artifact with a declared, minimal dependency set).

Read from the source (tests/module_imports.py): every module a role loads when it starts,
and what its command's functions import when it runs, may import outside the standard
library only what a distribution its extras name *directly* provides; a module no role
loads fails too, so a new part of the code gets a role. The import guard test
(tests/bridge/spark/test_spark_extra_imports.py) runs the Spark path itself with nothing
else importable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from tests.dependencies import declared, extras, import_names, installed_closure
from tests.module_imports import MODULES, ROOT, third_party_imports


@dataclass(frozen=True)
class Role:
    extras: tuple[str, ...]  # what its users install (the base always comes along)
    roots: tuple[str, ...]  # modules it imports; "pkg.*": every module of pkg
    commands: tuple[str, ...] = ()  # modules whose functions' imports count as well


ROLES = {
    "filestore": Role((), ("filestore.*",)),
    "log": Role(("log",), ("logstore.*", "bridge.tables")),
    # pyspark: the cluster's own (or the `pyspark` extra where there is no Spark)
    "spark": Role(("spark", "pyspark"), ("bridge", "bridge.spark.*", "bridge.consistency_read")),
    "meta-client": Role(("meta-client",), ("bridge.meta.client",)),
    "cli": Role(
        ("cli",),
        ("bridge.__main__", "bridge.cli"),
        ("bridge.commands.broker", "bridge.commands.ingest", "bridge.commands.table"),
    ),
    "worker": Role(("worker",), ("bridge.cli", "bridge.worker.*"), ("bridge.commands.worker",)),
    "meta": Role(("meta",), ("bridge.cli", "bridge.meta.*"), ("bridge.commands.meta",)),
    "monitoring": Role(
        ("monitoring",), ("bridge.cli", "bridge.exporter"), ("bridge.commands.exporter",)
    ),
    "demo": Role(
        ("demo",),
        ("bridge.cli", "bridge.demo.*", "bridge.prometheus_server"),
        ("bridge.commands.demo",),
    ),
}
# what a Spark cluster must not need for format("dts"): the MetaService (client and server),
# the worker, the command line, the demo
NOT_ON_A_SPARK_CLUSTER = {
    "pydantic",
    "httpx",
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "faust",
    "prometheus_client",
    "click",
    "rich",
    "plotly",
}


def _expand(roots: tuple[str, ...]) -> list[str]:
    out = []
    for root in roots:
        if root.endswith(".*"):
            package = root.removesuffix(".*")
            out += [m for m in MODULES if m == package or m.startswith(f"{package}.")]
        else:
            assert root in MODULES, f"no module {root}"
            out.append(root)
    return out


def _undeclared(role: Role) -> dict[str, list[str]]:
    _, outside = third_party_imports(_expand(role.roots), role.commands)
    allowed = import_names(declared(role.extras))
    return {name: sorted(by) for name, by in outside.items() if name not in allowed}


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_role_declares_what_its_modules_import(role: str) -> None:
    missing = _undeclared(ROLES[role])
    assert not missing, (
        f"extras {ROLES[role].extras} of pyproject.toml do not name the distribution of "
        f"(import name: importing modules) {missing}"
    )


def test_every_module_belongs_to_a_role() -> None:
    reached: set[str] = set()
    for role in ROLES.values():
        seen, _ = third_party_imports(_expand(role.roots), role.commands)
        reached |= seen
    assert set(MODULES) <= reached, sorted(set(MODULES) - reached)


def test_the_spark_extra_leaves_out_the_meta_service_the_worker_and_the_cli() -> None:
    # everything a cluster gets with `pip install dynamic-table-storage[spark]`, recursively
    on_cluster = import_names(installed_closure(declared(["spark", "pyspark"])))
    assert {"pyarrow", "polars", "fastavro", "confluent_kafka", "pyspark", "py4j"} <= on_cluster
    assert not on_cluster & NOT_ON_A_SPARK_CLUSTER, on_cluster & NOT_ON_A_SPARK_CLUSTER


def test_the_check_sees_an_import_the_role_does_not_declare() -> None:
    """The role check can fail: the MetaService client (httpx, pydantic) is outside the
    spark extra, and the Spark sink reaches it, in a function, only with option meta.url."""
    spark = ROLES["spark"]
    assert _undeclared(Role(spark.extras, ("bridge.meta.client",))).keys() == {"httpx", "pydantic"}
    with_meta_url = Role(spark.extras, spark.roots, ("bridge.spark.write.meta_jobs",))
    assert {"httpx", "pydantic"} <= _undeclared(with_meta_url).keys()
    with_client = Role(
        (*spark.extras, "meta-client"), spark.roots, ("bridge.spark.write.meta_jobs",)
    )
    assert not _undeclared(with_client)


def test_dev_installs_every_extra() -> None:
    """`make test` installs `.[dev,postgres]`: every role's distributions are there."""
    everything = declared(extras())
    assert declared(["dev"]).keys() >= everything.keys()
    assert declared(["all"]).keys() == declared(set(extras()) - {"dev"}).keys()


def test_documented_install_lines_name_existing_extras() -> None:
    texts = [ROOT / "README.md", ROOT / "Dockerfile", ROOT / "Makefile", *ROOT.glob("docs/*.md")]
    named = {
        (path.name, extra.strip())
        for path in texts
        for group in re.findall(
            r"(?:dynamic-table-storage|\.|\S+\.whl)\[([\w,\- ]+)\]", path.read_text()
        )
        for extra in group.split(",")
    }
    assert {e for _, e in named} >= {"spark", "postgres"}  # the finder finds the docs' lines
    unknown = {(doc, e) for doc, e in named if e not in extras()}
    assert not unknown, f"install lines name extras pyproject.toml does not have: {unknown}"
