"""The stitched side's reader, in a process of its own: delta-rs (``deltalake``, see
``readers_apart``) reads the Delta tables as a Python user beside the Spark pipeline
would, at no cost to the pipeline's JVM.

"Together" is read the two ways a Delta user has, in turn:

- ``latest``: each table's latest version, one after the other;
- ``batch``: the versions one batch of the stream wrote (its commits are tagged with the
  batch id, ``model.BATCH_TAG``): the newest batch every table has committed, each
  table read at its last version of that batch.
"""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from bench.pipeline.model import BATCH_TAG, CUSTOMERS, EVENT_COLUMN, TABLES
from bench.pipeline.probe import Sampler
from bench.pipeline.side import SAMPLES, probe_args, stop_event

#: commits looked at per table to find the batches it has written
HISTORY = 40


def read(path: str, version: int | None = None, sql: str = "SELECT * FROM t") -> pa.Table:
    """``sql`` over the table ``t`` at ``version`` (the latest: None), through delta-rs's
    query engine: its plain Arrow reads refuse tables with deletion vectors, its scans
    apply them."""
    query = QueryBuilder().register("t", DeltaTable(path, version=version))
    table = pa.table(query.execute(sql).read_all())
    # DataFusion hands strings out as views; the oracle's kernels take plain strings
    return table.cast(
        pa.schema(
            [f.with_type(pa.string()) if f.type == pa.string_view() else f for f in table.schema]
        )
    )


class DeltaReader:
    def __init__(self, paths: dict[str, str]) -> None:
        self.paths = paths
        self._ways = itertools.cycle(("latest", "batch"))

    def fresh(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for table in TABLES:
            latest = read(self.paths[table], sql=f"SELECT max({EVENT_COLUMN[table]}) FROM t")
            value = latest.column(0)[0].as_py()
            out[table] = int(value) if value is not None else None
        return out

    def together(self) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        way = next(self._ways)
        if way == "latest":
            return {t: read(p) for t, p in self.paths.items()}, {"way": way}
        versions = self.batch_versions()
        if versions is None:  # no batch written everywhere yet: nothing to read
            return {t: pa.table({}) for t in self.paths}, {"way": way}
        batch, chosen = versions
        data = {t: read(p, chosen.get(t)) for t, p in self.paths.items()}
        return data, {"way": way, "batch": batch}

    def batch_versions(self) -> tuple[int, dict[str, int]] | None:
        """The newest batch every measured table has a commit of, and each one's last
        version of it (the dimension, written by its own stream, is read at its latest)."""
        tagged = {t: self._batches(self.paths[t]) for t in TABLES}
        common = set.intersection(*(set(b) for b in tagged.values()))
        if not common:
            return None
        batch = max(common)
        return batch, {t: tagged[t][batch] for t in TABLES}

    @staticmethod
    def _batches(path: str) -> dict[int, int]:
        """batch id -> the last version tagged with it, over the table's recent commits."""
        out: dict[int, int] = {}
        for commit in DeltaTable(path).history(HISTORY):
            tag = commit.get("userMetadata") or ""
            if tag.startswith(BATCH_TAG):
                batch = int(tag[len(BATCH_TAG) :])
                out[batch] = max(out.get(batch, -1), int(commit["version"]))
        return out


def main() -> None:
    ns = probe_args(__doc__)
    paths = dict(p.split("=", 1) for p in ns.paths)
    assert set(paths) == {*TABLES, CUSTOMERS}, paths
    stop = stop_event()
    reader = DeltaReader(paths)
    sampler = Sampler(reader.fresh, reader.together, ns.work / SAMPLES, ns.interval).start()
    stop.wait()
    sampler.stop()


if __name__ == "__main__":
    main()
