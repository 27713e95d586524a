"""LogStore benchmark: changelog rows through the debezium-json codec and the broker.

Measures, in one run on the embedded broker:
- codec only: encode rows -> records, decode records -> rows (no broker; best of 3);
- normalize: an upsert log's rows -> a full changelog (`logstore.normalize`), the state
  holding every key, in batches of 100 rows (a small micro-batch) and of 50,000 (no broker);
- produce: LogWriter (encode + transactional produce + barriers) vs raw
  confluent-kafka produce of the same pre-encoded bytes (same producer settings);
- consume: LogReader (read_committed, decode, barrier gate) vs raw
  confluent-kafka consume of the same records.

Usage: python -m bench.bench_logstore --rows 1000000 --out bench/results/logstore.json
       python -m bench.bench_logstore --rows 200000 --codec-only   # no broker, seconds
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, Producer, TopicPartition

from logstore.broker import EmbeddedBroker
from logstore.codec import RawRecord, decode_records
from logstore.encode import encode_batch
from logstore.reader import DataBatch, LogReader
from logstore.spec import LogSpec
from logstore.topics import create_topic
from logstore.writer import PRODUCER_DEFAULTS, LogWriter

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("qty", pa.int32()),
        ("price", pa.decimal128(12, 2)),
        ("day", pa.date32()),
        ("updated", pa.timestamp("us")),
    ]
)
BATCH = 50_000
CODEC_REPEATS = 3


def changelog(n: int, seed: int = 7) -> pa.Table:
    """n rows: inserts of n*0.8 keys, then -U/+U pairs updating some of them."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64)
    kinds = np.full(n, "+I", dtype=object)
    start = n - 2 * (n // 20)  # the last 10% of rows are -U/+U pairs
    ids[start::2] = rng.integers(0, start, size=len(ids[start::2]))
    ids[start + 1 :: 2] = ids[start::2][: len(ids[start + 1 :: 2])]
    kinds[start::2] = "-U"
    kinds[start + 1 :: 2] = "+U"
    return pa.table(
        {
            "id": ids,
            "name": pa.array([f"customer-{i % 10_000}" for i in range(n)]),
            "amount": rng.normal(100, 30, n),
            "qty": rng.integers(0, 1000, n, dtype=np.int32),
            "price": pa.array(rng.integers(0, 10**8, n))
            .cast(pa.decimal128(19, 0))
            .cast(pa.decimal128(12, 2)),
            "day": pa.array(rng.integers(18000, 20000, n).astype(np.int32)).cast(pa.date32()),
            "updated": pa.array(rng.integers(1_600_000_000_000_000, 1_700_000_000_000_000, n)).cast(
                pa.timestamp("us")
            ),
            "_row_kind": pa.array(kinds.tolist(), pa.string()),
        }
    )


def bucketer(buckets: int):  # type: ignore[no-untyped-def]
    try:
        from filestore.format.bucket import bucket_ids

        return lambda t: bucket_ids(t, ["id"], buckets)
    except ImportError:  # pragma: no cover
        return lambda t: (np.asarray(t["id"]) % buckets).astype(np.int32)


def normalize_rates(data: pa.Table, spec: LogSpec) -> dict[str, float]:
    """Rows/s of updates to existing keys through a Normalizer seeded with every key (the
    default 32 shards), in small and in large batches."""
    from logstore.normalize import Normalizer

    state = data.drop_columns(["_row_kind"])
    rng = np.random.default_rng(11)
    out: dict[str, float] = {}
    for name, size, steps in (("normalize_small", 100, 200), ("normalize_large", BATCH, 4)):
        picked = state.take(rng.integers(0, state.num_rows, size * steps))
        updates = picked.set_column(2, "amount", pc.add(picked.column("amount"), 1.0))
        normalizer = Normalizer(spec)
        try:
            normalizer.seed(state)
            t0 = time.perf_counter()
            for i in range(steps):
                normalizer.process(updates.slice(i * size, size))
            out[f"{name}_rows_per_s"] = rate(size * steps, time.perf_counter() - t0)
        finally:
            normalizer.close()
    return out


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def bench(rows: int, buckets: int, codec_only: bool = False) -> dict[str, float | int]:
    data = changelog(rows)
    spec = LogSpec(
        f"bench.log_{uuid.uuid4().hex[:8]}", SCHEMA, ["id"], buckets, changelog_mode="all"
    )
    bk = bucketer(buckets)
    out: dict[str, float | int] = {"rows": rows, "buckets": buckets}

    # -- codec only (best of CODEC_REPEATS runs: the box is shared, single runs are noisy) --
    best = float("inf")
    encoded: list[Any] = []
    for _ in range(CODEC_REPEATS):
        t0 = time.perf_counter()
        encoded = [
            encode_batch(data.slice(i, BATCH), spec, bk, ts_ms=1) for i in range(0, rows, BATCH)
        ]
        best = min(best, time.perf_counter() - t0)
    out["encode_rows_per_s"] = rate(rows, best)
    records = sum(len(e) for e in encoded)
    out["records"] = records
    keys = [k for e in encoded for k in e.keys.to_pylist()]
    values = [v.encode() for e in encoded for v in e.values.to_pylist()]
    parts = np.concatenate([e.partitions for e in encoded]).tolist()
    raw = [
        RawRecord(p, i, k.encode(), v)
        for i, (p, k, v) in enumerate(zip(parts, keys, values, strict=True))
    ]
    best, decoded_rows = float("inf"), 0
    for _ in range(CODEC_REPEATS):
        t0 = time.perf_counter()
        decoded_rows = sum(
            decode_records(raw[i : i + BATCH], spec).table.num_rows
            for i in range(0, len(raw), BATCH)
        )
        best = min(best, time.perf_counter() - t0)
    out["decode_rows_per_s"] = rate(decoded_rows, best)
    del raw
    out.update(normalize_rates(data, spec))
    if codec_only:
        return out

    with EmbeddedBroker() as broker:
        bs = broker.bootstrap
        # -- produce: LogWriter ----------------------------------------------------
        print(f"  producing {rows:,} rows through LogWriter ...", flush=True)
        t0 = time.perf_counter()
        with LogWriter(bs, spec, bk, barrier_interval_s=None) as w:
            last = 0
            for i in range(0, rows, BATCH):
                w.write(data.slice(i, BATCH))
                if (i // BATCH) % 4 == 3:
                    last = w.barrier()
            last = w.barrier()
        out["writer_rows_per_s"] = rate(rows, time.perf_counter() - t0)

        # -- produce: raw confluent-kafka, same bytes ---------------------------------
        raw_topic = f"bench.raw_{uuid.uuid4().hex[:8]}"
        create_topic(bs, raw_topic, buckets, {})
        print(
            f"  producing {records:,} pre-encoded records with raw confluent-kafka ...", flush=True
        )
        p = Producer({"bootstrap.servers": bs, **PRODUCER_DEFAULTS})
        t0 = time.perf_counter()
        produce = p.produce
        for k, v, part in zip(keys, values, parts, strict=True):
            while True:
                try:
                    produce(raw_topic, v, k, part)
                    break
                except BufferError:
                    p.poll(0.05)
        p.flush(120)
        out["raw_produce_records_per_s"] = rate(records, time.perf_counter() - t0)

        # -- consume: LogReader ------------------------------------------------------
        print("  consuming through LogReader ...", flush=True)
        t0 = time.perf_counter()
        got = 0
        with LogReader(bs, spec, until_barrier=last, idle_timeout_s=60) as r:
            for ev in r:
                if isinstance(ev, DataBatch):
                    got += ev.table.num_rows
        out["reader_rows_per_s"] = rate(got, time.perf_counter() - t0)
        out["reader_rows"] = got

        # -- consume: raw confluent-kafka --------------------------------------------
        print("  consuming with raw confluent-kafka ...", flush=True)
        c = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": "bench-raw",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 100,
            }
        )
        c.assign([TopicPartition(raw_topic, q, 0) for q in range(buckets)])
        t0 = time.perf_counter()
        n = 0
        deadline = time.monotonic() + 300
        while n < records and time.monotonic() < deadline:
            for m in c.consume(num_messages=20_000, timeout=0.5):
                if m.error() is None and m.value() is not None:
                    n += 1
        out["raw_consume_records_per_s"] = rate(n, time.perf_counter() - t0)
        c.close()

    out["writer_vs_raw_produce"] = out["writer_rows_per_s"] / out["raw_produce_records_per_s"]
    out["reader_vs_raw_consume"] = out["reader_rows_per_s"] / out["raw_consume_records_per_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--buckets", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("bench/results/logstore.json"))
    ap.add_argument("--codec-only", action="store_true", help="codec rates only, no broker")
    args = ap.parse_args()
    print(f"logstore benchmark: {args.rows:,} changelog rows, {args.buckets} buckets", flush=True)
    res = bench(args.rows, args.buckets, args.codec_only)
    codec_lines = [
        ("codec encode (rows/s)", res["encode_rows_per_s"], ""),
        ("codec decode (rows/s)", res["decode_rows_per_s"], ""),
        ("normalize, 100-row batches (rows/s)", res["normalize_small_rows_per_s"], ""),
        ("normalize, 50k-row batches (rows/s)", res["normalize_large_rows_per_s"], ""),
    ]
    if args.codec_only:
        print(f"\n{'measure':<40}{'rate':>14}")
        for name, value, _ in codec_lines:
            print(f"{name:<40}{value:>14,.0f}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2))
        print(f"results written to {args.out}")
        return
    lines = [
        *codec_lines,
        (
            "LogWriter produce (rows/s)",
            res["writer_rows_per_s"],
            f"{res['writer_vs_raw_produce']:.2f}x raw",
        ),
        ("raw confluent-kafka produce (rec/s)", res["raw_produce_records_per_s"], "1.00x"),
        (
            "LogReader consume (rows/s)",
            res["reader_rows_per_s"],
            f"{res['reader_vs_raw_consume']:.2f}x raw",
        ),
        ("raw confluent-kafka consume (rec/s)", res["raw_consume_records_per_s"], "1.00x"),
    ]
    print(f"\n{'measure':<40}{'rate':>14}  ratio")
    for name, value, ratio in lines:
        print(f"{name:<40}{value:>14,.0f}  {ratio}")
    print(
        f"(rows {res['rows']:,} -> {res['records']:,} Kafka records: -U/+U pairs travel as one 'u')"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))
    print(f"results written to {args.out}")
    if res["reader_rows"] != res["rows"]:
        sys.exit(f"reader returned {res['reader_rows']} rows, expected {res['rows']}")


if __name__ == "__main__":
    main()
