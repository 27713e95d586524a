"""The artifact that ships (issue 26): the wheel pip builds from this checkout.

Its metadata declares the base and every extra exactly as pyproject.toml lists them (an
installer reads only the metadata), and it carries every module and the ``py.typed``
markers of the three packages, the ``dts`` command, and nothing of the repository beside
them (tests, benchmarks, examples). The Spark extension's jar is not in it: `make spark-ext`
compiles it against the cluster's own Spark (docs/deploy.md).
"""

from __future__ import annotations

import email.parser
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.dependencies import PROJECT, canonical, extras, project_table
from tests.module_imports import PACKAGES, ROOT
from tests.wheel_build import build_wheel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def _dist_info(z: zipfile.ZipFile) -> str:
    (info,) = {n.split("/")[0] for n in z.namelist() if n.split("/")[0].endswith(".dist-info")}
    return info


def _by_extra(lines: list[str], names: list[str]) -> dict[str, set[str]]:
    """{extra ("" for the base): its requirements without the marker}."""
    out: dict[str, set[str]] = {"": set()}
    for line in lines:
        req = Requirement(line)
        marker, req.marker = req.marker, None
        if marker is None:
            out[""].add(str(req))
            continue
        for extra in names:
            if marker.evaluate({"extra": extra}):
                out.setdefault(extra, set()).add(str(req))
    return out


def test_the_wheel_declares_the_base_and_every_extra(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        meta = email.parser.Parser().parsestr(z.read(f"{_dist_info(z)}/METADATA").decode())
    assert canonical(meta["Name"]) == PROJECT
    assert meta["Requires-Python"] == project_table()["requires-python"]
    names = sorted(extras())
    assert sorted(canonical(e) for e in meta.get_all("Provides-Extra") or []) == names
    shipped = _by_extra(meta.get_all("Requires-Dist") or [], names)
    base = project_table()["dependencies"]
    assert isinstance(base, list)
    expected = {"": {str(Requirement(r)) for r in base}}
    expected |= {e: {str(Requirement(r)) for r in reqs} for e, reqs in extras().items()}
    assert shipped == expected
    # the roles on a Spark cluster stay small: the FileStore's five, and the log's two
    assert {Requirement(r).name for r in shipped[""]} == {
        "pyarrow",
        "fastavro",
        "numpy",
        "polars",
        "pyroaring",
        "obstore",
    }
    assert {Requirement(r).name for r in shipped["spark"]} == {PROJECT}  # = [log]


def test_the_wheel_carries_the_packages_the_command_and_nothing_else(wheel: Path) -> None:
    assert wheel.name.endswith("-py3-none-any.whl")  # pure Python: any executor's platform
    with zipfile.ZipFile(wheel) as z:
        info = _dist_info(z)
        names = {n for n in z.namelist() if not n.endswith("/")}
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    code = {n for n in names if not n.startswith(f"{info}/")}
    in_repo = {
        str(p.relative_to(ROOT))
        for package in PACKAGES
        for p in (ROOT / package).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert code == in_repo
    assert {f"{p}/py.typed" for p in PACKAGES} <= code  # typed for mypy users of the API
    assert "dts = bridge.__main__:main" in entry_points
