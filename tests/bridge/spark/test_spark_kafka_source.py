"""Spark's own Kafka source (spark-sql-kafka-0-10) on a LogStore topic, batch and streaming.

A LogWriter writes inserts, updates and deletes over several barriers (and one aborted
barrier); the `dts worker` commits them to the FileStore. Spark's Kafka source reads the
topic and `bridge.spark.kafka_rows.changelog_rows` turns it into typed changelog rows,
which must equal the FileStore's changelog (`Table.changes`) for the same barriers.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bridge.spark.errors import KafkaRowsError
from bridge.spark.kafka_rows import changelog_rows, kafka_source_options
from bridge.spark.session import spark_kafka_available, spark_kafka_jars_dir
from bridge.tables import open_log_writer
from tests.bridge.spark.support import SCHEMA, make_table
from tests.bridge.worker.support import latest_barrier, start_worker, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

COLS = ["id", "k", "v"]


@pytest.fixture(autouse=True)
def _connector() -> None:
    assert spark_kafka_available(), (
        f"Spark's Kafka connector is not in {spark_kafka_jars_dir()}: run `make spark-kafka-jars`"
    )


def _changes(ids: list[int], kind: str, tag: str) -> pa.Table:
    return pa.table(
        {
            "id": ids,
            "k": [f"{tag}{i}" for i in ids],
            "v": [i * 1.5 for i in ids],
            "_row_kind": [kind] * len(ids),
        },
        schema=SCHEMA.append(pa.field("_row_kind", pa.string())),
    )


def _write_barriers(table: Any, bootstrap: str) -> list[int]:
    barriers = []
    with open_log_writer(table, bootstrap, barrier_interval_s=None) as w:
        w.write(_changes(list(range(10)), "+I", "a"))
        barriers.append(w.barrier())
        # updates with both images, then deletes
        w.write(
            pa.concat_tables(
                [
                    _changes([1, 2], "-U", "a"),
                    _changes([1, 2], "+U", "b"),
                    _changes([3], "-D", "a"),
                    _changes([10, 11], "+I", "a"),
                ]
            )
        )
        barriers.append(w.barrier())
        w.write(_changes([20, 21], "+I", "doomed"))
        w._producer.flush(10)
        w.abort()  # never visible, to the worker or to Spark
        w.write(pa.concat_tables([_changes([4], "-D", "a"), _changes([1], "-U", "b")]))
        w.write(_changes([1], "+U", "c"))
        barriers.append(w.barrier())
    return barriers


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["_row_kind"], r["id"], r["k"], r["v"])


def _filestore_changelog(table: Any, barriers: list[int]) -> dict[int, Counter[tuple[Any, ...]]]:
    by_barrier = {s.barrier: s.id for s in table.snapshots() if s.barrier is not None}
    out: dict[int, Counter[tuple[Any, ...]]] = {}
    prev = None
    for b in barriers:
        sid = by_barrier[b]
        if prev is None:
            rows = table.read(snapshot_id=sid).to_pylist()
            out[b] = Counter(("+I", r["id"], r["k"], r["v"]) for r in rows)
        else:
            out[b] = Counter(_key(r) for r in table.changes(prev, sid).to_pylist())
        prev = sid
    return out


def _per_barrier(rows: list[dict[str, Any]]) -> dict[int, Counter[tuple[Any, ...]]]:
    out: dict[int, Counter[tuple[Any, ...]]] = {}
    for r in rows:
        out.setdefault(r["_barrier"], Counter())[_key(r)] += 1
    return out


@pytest.fixture
def committed(broker: Any, warehouse: Path, tmp_path: Path) -> tuple[Any, list[int]]:
    """A table whose log holds 3 committed barriers (and an aborted one), all in the FileStore."""
    name = f"db.kafka_{uuid.uuid4().hex[:8]}"
    # `all` keeps -U/+U in the log; `input` makes the FileStore keep its input changelog
    table = make_table(
        warehouse, name, **{"log.changelog-mode": "all", "changelog-producer": "input"}
    )
    barriers = _write_barriers(table, broker.bootstrap)
    worker = start_worker(
        warehouse, broker.bootstrap, [table.name], f"g-{uuid.uuid4().hex[:8]}", tmp_path
    )
    try:
        wait_for(lambda: latest_barrier(table) == barriers[-1], 90, "the worker", worker)
    finally:
        assert worker.stop() == 0, worker.tail()
    return table, barriers


def test_batch_kafka_source_equals_filestore_changelog(
    dts: Any, broker: Any, committed: tuple[Any, list[int]]
) -> None:
    table, barriers = committed
    spec_topic = table.schema.core_options.log_topic(table.name)
    df = (
        dts.read.format("kafka")
        .options(**kafka_source_options(broker.bootstrap, spec_topic))
        .load()
    )
    changes = changelog_rows(df, table)
    assert changes.columns[:4] == [*COLS, "_row_kind"]
    assert dict(changes.dtypes)["v"] == "double" and dict(changes.dtypes)["_barrier"] == "bigint"
    rows = changes.toArrow().to_pylist()
    assert not [r for r in rows if r["_row_kind"] is None]  # every record decoded
    assert {r["_barrier"] for r in rows} == set(barriers)  # the aborted one never shows
    assert _per_barrier(rows) == _filestore_changelog(table, barriers)
    assert not any(r["k"].startswith("doomed") for r in rows)


def test_streaming_kafka_source_equals_filestore_changelog(
    dts: Any, broker: Any, committed: tuple[Any, list[int]], tmp_path: Path
) -> None:
    table, barriers = committed
    topic = table.schema.core_options.log_topic(table.name)
    source = dts.readStream.format("kafka").options(**kafka_source_options(broker.bootstrap, topic))

    # per micro-batch (a bounded DataFrame): rows with their barrier
    got: list[dict[str, Any]] = []
    q = (
        source.load()
        .writeStream.foreachBatch(
            lambda df, _id: got.extend(changelog_rows(df, table).toArrow().to_pylist())
        )
        .option("checkpointLocation", str(tmp_path / "ck-batches"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120) and q.exception() is None
    assert _per_barrier(got) == _filestore_changelog(table, barriers)

    # the stream itself, into a memory sink: the same rows without _barrier
    with pytest.raises(KafkaRowsError, match="foreachBatch"):
        changelog_rows(source.load(), table)
    sink = f"kafka_rows_{uuid.uuid4().hex[:8]}"
    q = (
        changelog_rows(source.load(), table, barrier=False)
        .writeStream.format("memory")
        .queryName(sink)
        .option("checkpointLocation", str(tmp_path / "ck-memory"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120) and q.exception() is None
    streamed = dts.table(sink).toArrow().to_pylist()
    assert Counter(_key(r) for r in streamed) == sum(
        _filestore_changelog(table, barriers).values(), Counter()
    )


def test_upsert_log_of_a_primary_key_table_arrives_as_op_c(
    dts: Any, broker: Any, warehouse: Path
) -> None:
    """Primary-key tables log in upsert mode: +U is stored as op "c" and reads back as +I."""
    table = make_table(warehouse, f"db.ups_{uuid.uuid4().hex[:8]}")
    with open_log_writer(table, broker.bootstrap, barrier_interval_s=None) as w:
        w.write(_changes([1, 2], "+I", "a"))
        first = w.barrier()
        w.write(pa.concat_tables([_changes([1], "+U", "b"), _changes([2], "-D", "a")]))
        second = w.barrier()
    topic = table.schema.core_options.log_topic(table.name)
    raw = dts.read.format("kafka").options(**kafka_source_options(broker.bootstrap, topic)).load()
    ops = [
        r["op"]
        for r in raw.where("value IS NOT NULL")
        .selectExpr("get_json_object(CAST(value AS STRING), '$.op') AS op")
        .orderBy("partition", "offset")
        .collect()
    ]
    assert sorted(ops) == ["c", "c", "c", "d"]
    rows = changelog_rows(raw, table).toArrow().to_pylist()
    assert sorted((r["_barrier"], r["_row_kind"], r["id"], r["k"]) for r in rows) == [
        (first, "+I", 1, "a1"),
        (first, "+I", 2, "a2"),
        (second, "+I", 1, "b1"),
        (second, "-D", 2, "a2"),
    ]
