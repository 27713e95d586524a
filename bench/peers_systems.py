"""The peers' phases of the peer benchmark (bench/bench_peers.py): pypaimon, pypaimon-rust
and deltalake on the same data and the same primary-key table shape as this project's.

They run in the peers' interpreter (bench/.venv-peers), so only the standard library is
imported at module level: each system is imported inside its phase.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.peers_data import (
    BUCKETS,
    Stopwatch,
    batches,
    load,
    read_result,
    timed_read,
    upsert_seconds,
    warmup,
)

# -- pypaimon (pure Python) -----------------------------------------------------


def _paimon_table(work: Path) -> Any:
    import pyarrow as pa
    from pypaimon import CatalogFactory, Schema

    catalog = CatalogFactory.create({"warehouse": str(work / "paimon")})
    catalog.create_database("bench", True)
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("amount", pa.float64()),
            ("qty", pa.int64()),
            ("name", pa.string()),
        ]
    )
    catalog.create_table(
        "bench.t",
        Schema.from_pyarrow_schema(schema, primary_keys=["id"], options={"bucket": str(BUCKETS)}),
        True,
    )
    return catalog.get_table("bench.t"), schema


def _paimon_write(table: Any, schema: Any, data: Any) -> None:
    builder = table.new_batch_write_builder()
    write, commit = builder.new_write(), builder.new_commit()
    write.write_arrow(data.cast(schema))
    commit.commit(write.prepare_commit())
    write.close()
    commit.close()


def phase_paimon_write(data: Path, work: Path) -> dict[str, Any]:
    base = load(data, "base.parquet")

    def paimon_once(d: Any, w: Path) -> None:
        table, schema = _paimon_table(w)
        _paimon_write(table, schema, d)

    warmup(base, work, paimon_once)
    table, schema = _paimon_table(work)
    watch = Stopwatch()
    _paimon_write(table, schema, base)
    return {**watch.elapsed(), "rows": base.num_rows}


def phase_paimon_read(data: Path, work: Path) -> dict[str, Any]:
    table, schema = _paimon_table(work)
    for batch in [load(data, "base.parquet"), *batches(data)]:
        _paimon_write(table, schema, batch)

    def read() -> Any:
        builder = table.new_read_builder()
        return builder.new_read().to_arrow(builder.new_scan().plan().splits())

    elapsed, first, result = timed_read(read)
    return {**elapsed, "first_seconds": first, **read_result(result)}


# -- pypaimon-rust (Apache Paimon's Rust core) ----------------------------------


def _rust_table(work: Path) -> Any:
    from pypaimon_rust.datafusion import PaimonCatalog, SQLContext

    warehouse = str(work / "paimon-rust")
    # PaimonCatalog (0.4) can get a table but not create one: the DDL goes through SQL
    ctx = SQLContext()
    ctx.register_catalog("paimon", {"warehouse": warehouse})
    ctx.sql("CREATE SCHEMA paimon.bench")
    ctx.sql(
        "CREATE TABLE paimon.bench.t (id BIGINT NOT NULL, amount DOUBLE, qty BIGINT, "
        f"name STRING, PRIMARY KEY (id)) WITH ('bucket' = '{BUCKETS}')"
    )
    return PaimonCatalog({"warehouse": warehouse}).get_table("bench.t")


def _rust_write(table: Any, data: Any) -> None:
    # write_arrow takes record batches, not tables: the same 100k-row batches this
    # project's TableWrite gets. The Rust writer never compacts (its docs: no background
    # compaction), so the merge-read merges six sorted runs per bucket, as this project's
    # does with auto-compaction off
    builder = table.new_batch_write_builder()
    write, commit = builder.new_write(), builder.new_commit()
    for batch in data.to_batches(max_chunksize=100_000):
        write.write_arrow(batch)
    commit.commit(write.prepare_commit())
    write.close()
    commit.close()


def phase_paimon_rust_write(data: Path, work: Path) -> dict[str, Any]:
    base = load(data, "base.parquet")
    warmup(base, work, lambda d, w: _rust_write(_rust_table(w), d))
    table = _rust_table(work)
    watch = Stopwatch()
    _rust_write(table, base)
    return {**watch.elapsed(), "rows": base.num_rows}


def phase_paimon_rust_read(data: Path, work: Path) -> dict[str, Any]:
    import pyarrow as pa

    table = _rust_table(work)
    _rust_write(table, load(data, "base.parquet"))
    upserting = upsert_seconds(lambda batch: _rust_write(table, batch), data)

    def read() -> Any:
        builder = table.new_read_builder()
        return pa.Table.from_batches(builder.new_read().read(builder.new_scan().plan().splits()))

    elapsed, first, result = timed_read(read)
    return {**elapsed, "first_seconds": first, **read_result(result), "write_seconds": upserting}


# -- deltalake --------------------------------------------------------------------


def _delta_merge(path: str, data: Any) -> None:
    from deltalake import DeltaTable

    (
        DeltaTable(path)
        .merge(source=data, predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def _delta_create(work: Path, schema: Any) -> str:
    from deltalake import write_deltalake

    path = str(work / "delta")
    write_deltalake(path, schema.empty_table())
    return path


def phase_delta_write(data: Path, work: Path) -> dict[str, Any]:
    base = load(data, "base.parquet")
    warmup(base, work, lambda d, w: _delta_merge(_delta_create(w, d.schema), d))
    path = _delta_create(work, base.schema)
    watch = Stopwatch()
    _delta_merge(path, base)
    return {**watch.elapsed(), "rows": base.num_rows}


def phase_delta_read(data: Path, work: Path) -> dict[str, Any]:
    from deltalake import DeltaTable

    base = load(data, "base.parquet")
    path = _delta_create(work, base.schema)
    _delta_merge(path, base)
    upserting = upsert_seconds(lambda batch: _delta_merge(path, batch), data)
    elapsed, first, result = timed_read(lambda: DeltaTable(path).to_pyarrow_table())
    return {**elapsed, "first_seconds": first, **read_result(result), "write_seconds": upserting}


PEER_PHASES = {
    "paimon_write": phase_paimon_write,
    "paimon_read": phase_paimon_read,
    "paimon_rust_write": phase_paimon_rust_write,
    "paimon_rust_read": phase_paimon_rust_read,
    "delta_write": phase_delta_write,
    "delta_read": phase_delta_read,
}
