"""Model test: processes committing concurrently to one table, checked in commit order.

Every process writes a shared key (42) and keys of its own in every commit. The
oracle replays the APPEND snapshots in snapshot order: after each one, key 42
holds the value that commit wrote, and every process's own keys hold its latest
committed value. An acknowledged write that is invisible at its own snapshot, or
overwritten by an earlier commit, is a lost update.
"""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pyarrow as pa

from filestore import Catalog, CommitConflict

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
SHARED = 42
PROCS, COMMITS = 8, 30


def _committer(warehouse: str, proc: int, commits: int, out: str, start: object) -> None:
    t = Catalog(warehouse).get_table("db.t")
    start.wait()  # type: ignore[attr-defined]
    acked, conflicts = [], 0
    for c in range(1, commits + 1):
        value = f"p{proc}-c{c}"
        rows = pa.table(
            {
                "id": pa.array([SHARED, 1000 + proc, 2000 + proc * 100 + c], pa.int64()),
                "v": [value] * 3,
            }
        )
        while True:
            w = t.new_write(f"p{proc}")
            w.write(rows)
            try:
                snap = w.commit(identifier=c)
            except CommitConflict:
                conflicts += 1  # only compaction races may conflict; rewrite and retry
                continue
            finally:
                w.close()
            assert snap is not None
            acked.append({"identifier": c, "snapshot": snap.id, "value": value})
            break
    Path(out).write_text(json.dumps({"acked": acked, "conflicts": conflicts}))


def _values(t: object, snapshot_id: int) -> dict[int, str]:
    data = t.read(snapshot_id=snapshot_id).to_pydict()  # type: ignore[attr-defined]
    return dict(zip(data["id"], data["v"], strict=True))


def test_concurrent_committers_respect_commit_order(warehouse: Path, tmp_path: Path) -> None:
    # 2 buckets: the shared key's bucket sees every process; others see some
    Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_key=["id"], options={"bucket": "2"}
    )
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    outs = [str(tmp_path / f"p{i}.json") for i in range(PROCS)]
    procs = [
        ctx.Process(target=_committer, args=(str(warehouse), i, COMMITS, outs[i], start))
        for i in range(PROCS)
    ]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=600)
        assert p.exitcode == 0
    results = [json.loads(Path(o).read_text()) for o in outs]
    t = Catalog(str(warehouse)).get_table("db.t")
    appends = [s for s in t.snapshots() if s.commit_kind == "APPEND"]
    assert len(appends) == PROCS * COMMITS
    written = {(f"p{i}", a["identifier"]): a for i, r in enumerate(results) for a in r["acked"]}
    invisible = 0
    own: dict[int, str] = {}
    for s in appends:  # the oracle, in commit order
        a = written[(s.commit_user, s.commit_identifier)]
        assert a["snapshot"] == s.id
        proc = int(s.commit_user[1:])
        own[1000 + proc] = a["value"]
        values = _values(t, s.id)
        expected = {SHARED: a["value"], **own}
        invisible += sum(values.get(k) != v for k, v in expected.items())
    conflicts = sum(r["conflicts"] for r in results)
    print(
        f"\ncommit order: {PROCS} processes x {COMMITS} commits = {len(appends)} acknowledged, "
        f"{conflicts} conflicts retried, {invisible} invisible acknowledged writes"
    )
    assert invisible == 0
    final = _values(t, t.latest_snapshot().id)  # type: ignore[union-attr]
    assert (
        final[SHARED] == written[(appends[-1].commit_user, appends[-1].commit_identifier)]["value"]
    )
    assert len(final) == 1 + PROCS + PROCS * COMMITS
