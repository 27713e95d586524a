"""The Spark peers benchmark (bench/spark_peers) cannot rot: its dts side runs through real
local Spark at a tiny scale, and its table, ratios and checks are tested on given results.
The peers' sides run in `make bench-peers` only, whose own check stops on a peer read that
disagrees with the input: here they ran only on a machine that had set them up (Paimon's
PySpark 3.5 venv, the connectors' jars), never on a clean clone, and cost two minutes of
the suite's 35 where they did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.results import replace_section
from bench.spark_peers.__main__ import (
    BEGIN,
    END,
    check,
    format_table,
    main,
    table_rows,
)
from bench.spark_peers.common import PHASES


def _side(rates: dict[str, float]) -> dict[str, object]:
    return {"phases": {p: {"rows": 1000, "seconds": 1000 / r} for p, r in rates.items()}}


def test_table_rates_and_ratios() -> None:
    results = {
        "dts": _side({"write": 2000.0, "upsert": 500.0}),
        "paimon": _side({"write": 1000.0, "upsert": 1000.0}),
        "delta": _side({"write": 4000.0}),
    }
    rows = {r["phase"]: r for r in table_rows(results)}
    assert set(rows) == {"write", "upsert"}  # phases nobody ran are left out
    assert rows["write"]["dts_vs_paimon"] == pytest.approx(2.0)
    assert rows["write"]["dts_vs_delta"] == pytest.approx(0.5)
    assert rows["upsert"]["dts_vs_paimon"] == pytest.approx(0.5)
    assert rows["upsert"]["dts_vs_delta"] is None
    text = format_table(table_rows(results))
    assert text.splitlines()[0] == (
        "| phase | rows | dts rows/s | Paimon rows/s | Delta rows/s | dts/Paimon | dts/Delta |"
    )
    assert "| write | 1,000 | 2,000 | 1,000 | 4,000 | 2.00x | 0.50x |" in text
    assert "| upsert | 1,000 | 500 | 1,000 | - | 0.50x | - |" in text


def test_check_compares_reads_with_the_input() -> None:
    spec = {"expected": {"count": 10, "sum": 5.0, "range_count": 2, "range_sum": 1.0}}
    good = {"phases": {"full_read": {"result": [10, 5.0]}, "filtered_read": {"result": [2, 1.0]}}}
    bad = {"phases": {"full_read": {"result": [11, 5.0]}}}
    assert check(spec, {"dts": good}) == []
    problems = check(spec, {"delta": bad})
    assert any("delta full_read: got count 11" in p for p in problems)
    assert any("delta: no filtered_read" in p for p in problems)


def test_readme_section_is_replaced_in_place(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# head\n{BEGIN}\nold\n{END}\ntail\n")
    replace_section(readme, BEGIN, END, "new table\n")
    assert readme.read_text() == f"# head\n{BEGIN}\nnew table\n{END}\ntail\n"


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_benchmark_runs_end_to_end_at_tiny_scale(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# bench\n{BEGIN}\n{END}\n")
    out = tmp_path / "spark_peers.json"
    argv = ["--rows", "2000", "--batches", "2", "--batch-rows", "400", "--repeat", "1"]
    argv += ["--systems", "dts", "--no-setup", "--work", str(tmp_path / "work")]
    argv += ["--out", str(out), "--readme", str(readme)]
    report = main(argv)
    assert report["problems"] == []  # every system's reads matched the generated input
    phases = {r["phase"]: r for r in report["table"]}
    assert set(PHASES) <= set(phases)
    for phase in PHASES:
        assert phases[phase]["rates"]["dts"] > 0
    assert phases["full_read"]["rows"] == 2000 + 2 * 200  # half of each batch is new keys
    dts = report["systems"]["dts"]
    kinds = dts["checks"]["changelog_row_kinds"]
    assert kinds["+I"] == 400 and kinds["-U"] == kinds["+U"] <= 400  # new keys; updated keys
    assert dts["phases"]["changelog"]["rows_returned"] == sum(kinds.values())
    # the stream sees every upsert commit's changes: each update as -U/+U, each new key +I
    assert dts["phases"]["stream"]["rows_returned"] == 400 + 2 * 400
    # the log tier: the same topic, the same records through dts and Spark's Kafka source
    assert dts["phases"]["log_stream"]["rows_returned"] == 400
    markers = dts["phases"]["log_stream_kafka"]["rows_returned"] - 400  # input rows
    assert markers > 0 and markers % 4 == 0  # a barrier marker in each of the 4 partitions
    assert json.loads(out.read_text())["table"] == report["table"]
    text = readme.read_text()
    assert "| phase | rows | dts rows/s |" in text and "Load average" in text
