"""consistent-version (strong/weak, who holds back and by how much), lineage, late-data trace."""

from __future__ import annotations

import pytest

from bridge.meta.client import MetaClient
from bridge.meta.errors import NoConsistentVersion, TableNotRegistered
from bridge.meta.models import ConsistencyMode, JobState

# The server fixture times jobs out after 1 s; these jobs never heartbeat, and on a
# loaded machine a test can take longer than that: each job gets its own long timeout.
_NO_TIMEOUT_MS = 3_600_000


def _pipeline(client: MetaClient) -> None:
    """T0 (CDC base) -> T1, T2 -> T3 (T3 joins T1 and T2), like the seed's figure."""
    for kind, sources, sink, job in (
        ("worker", [], "db.t0", "w0"),
        ("spark-streaming", ["db.t0"], "db.t1", "s1"),
        ("spark-streaming", ["db.t0"], "db.t2", "s2"),
        ("spark-streaming", ["db.t1", "db.t2"], "db.t3", "s3"),
    ):
        client.register_job(kind, sources, [sink], job_id=job, heartbeat_timeout_ms=_NO_TIMEOUT_MS)


def _complete(client: MetaClient, table: str, barriers: list[int]) -> None:
    for b in barriers:
        client.report_barrier(table, b, snapshot_id=b // 1000)


def test_strong_and_weak_with_holdback(client: MetaClient) -> None:
    _pipeline(client)
    _complete(client, "db.t0", [1000, 2000, 3000, 4000])
    _complete(client, "db.t1", [1000, 2000, 3000, 4000])
    _complete(client, "db.t2", [1000, 2000])  # s2 is slow
    _complete(client, "db.t3", [1000, 2000])

    strong = client.consistent_version(["db.t1", "db.t2", "db.t3"])
    assert strong.barrier == 2000
    assert {t.table: t.snapshot_id for t in strong.tables} == {"db.t1": 2, "db.t2": 2, "db.t3": 2}
    assert strong.held_back_by == "db.t2"
    assert strong.holdback_ms == 2000
    assert "db.t2" in strong.message and "2000 ms" in strong.message
    by_table = {t.table: t for t in strong.tables}
    assert by_table["db.t1"].behind_ms == 2000 and by_table["db.t2"].lag_ms == 2000

    weak = client.consistent_version(["db.t1", "db.t2"], mode="weak")
    assert weak.barrier is None
    assert {t.table: t.barrier for t in weak.tables} == {"db.t1": 4000, "db.t2": 2000}
    assert {t.table: t.snapshot_id for t in weak.tables} == {"db.t1": 4, "db.t2": 2}
    assert weak.held_back_by == "db.t2" and weak.holdback_ms == 2000

    _complete(client, "db.t2", [3000, 4000])
    _complete(client, "db.t3", [3000, 4000])
    caught_up = client.consistent_version(["db.t1", "db.t2", "db.t3"])
    assert caught_up.barrier == 4000 and caught_up.held_back_by is None
    assert caught_up.holdback_ms == 0


def test_strong_waits_for_tables_between(client: MetaClient) -> None:
    """{T0, T3}: T1 and T2 lie between them, so T3's barrier B needs them at B too."""
    _pipeline(client)
    _complete(client, "db.t0", [1000, 2000, 3000])
    _complete(client, "db.t1", [1000, 2000, 3000])
    _complete(client, "db.t2", [1000])
    _complete(client, "db.t3", [1000, 2000, 3000])  # cannot really be, but shows the rule
    v = client.consistent_version(["db.t0", "db.t3"])
    assert v.barrier == 1000
    assert v.held_back_by == "db.t2"
    between = {t.table for t in v.tables if not t.listed}
    assert between == {"db.t1", "db.t2"}


def test_exact_barrier_match_and_micro_batches(client: MetaClient) -> None:
    """A micro-batch sink may complete only some source barriers: strong picks a barrier
    that *every* table completed, never 'the greatest at or below'."""
    client.register_job("spark-streaming", ["db.src"], ["db.a"], job_id="a")
    client.register_job("spark-streaming", ["db.src"], ["db.b"], job_id="b")
    _complete(client, "db.a", [1000, 3000])
    _complete(client, "db.b", [1000, 2000])
    v = client.consistent_version(["db.a", "db.b"])
    assert v.barrier == 1000
    assert v.held_back_by == "db.b"


def test_no_consistent_version_is_a_clear_refusal(client: MetaClient) -> None:
    _pipeline(client)
    _complete(client, "db.t1", [1000])
    with pytest.raises(NoConsistentVersion) as err:
        client.consistent_version(["db.t1", "db.t2"])
    assert err.value.details["held_back_by"] == "db.t2"
    assert "no completed barrier yet for db.t2" in err.value.message
    _complete(client, "db.t2", [1500])
    with pytest.raises(NoConsistentVersion, match="share no completed barrier"):
        client.consistent_version(["db.t1", "db.t2"])
    with pytest.raises(TableNotRegistered, match=r"db\.nope"):
        client.consistent_version(["db.t1", "db.nope"])
    # weak still answers, naming who has nothing yet
    weak = client.consistent_version(["db.t1", "db.t3"], ConsistencyMode.WEAK)
    assert weak.held_back_by == "db.t3"


def test_lineage_tree_and_mermaid(client: MetaClient) -> None:
    _pipeline(client)
    client.register_job("spark-batch", ["db.other"], ["db.unrelated"], job_id="u")
    lin = client.lineage("db.t1")
    assert [n.table for n in lin.upstream] == ["db.t0"]
    assert lin.upstream[0].jobs == ["s1"]
    assert [n.table for n in lin.downstream] == ["db.t3"]
    lin3 = client.lineage("db.t3")
    assert sorted(n.table for n in lin3.upstream) == ["db.t1", "db.t2"]
    assert all(n.children[0].table == "db.t0" for n in lin3.upstream)  # transitively
    assert "db.t0  [s1]" in lin3.tree
    assert lin3.tree.splitlines()[0] == "db.t3"
    assert lin3.mermaid.startswith("flowchart LR")
    assert '-->|"s3"|' in lin3.mermaid and "db.unrelated" not in lin3.mermaid
    assert {(e.source, e.sink) for e in lin3.edges} == {
        ("db.t0", "db.t1"),
        ("db.t0", "db.t2"),
        ("db.t1", "db.t3"),
        ("db.t2", "db.t3"),
    }
    edges, mermaid = client.graph()
    assert len(edges) == 5 and "db.unrelated" in mermaid
    # lineage history stays after the job ends
    client.finish_job("s3")
    assert {e.job_state for e in client.lineage("db.t3").edges if e.job_id == "s3"} == {
        JobState.FINISHED
    }
    statuses = {t.table: t for t in client.tables()}
    assert statuses["db.t0"].downstream == ["db.t1", "db.t2"]
    assert statuses["db.t3"].writer_job_id is None


def test_trace_finds_where_the_lag_starts(client: MetaClient) -> None:
    _pipeline(client)
    _complete(client, "db.t0", [1000, 2000, 3000, 4000])
    _complete(client, "db.t1", [1000, 2000, 3000, 4000])
    _complete(client, "db.t2", [1000, 2000])  # the lag starts here, in job s2
    _complete(client, "db.t3", [1000, 2000])
    tr = client.trace("db.t3")
    assert tr.origin_table == "db.t2"
    assert tr.origin_job_id == "s2" and tr.origin_job_state is JobState.RUNNING
    assert tr.path == ["db.t3", "db.t2"]
    assert tr.lag_ms == 2000 and tr.origin_lag_ms == 2000
    assert "job s2" in tr.explanation and "db.t2" in tr.explanation
    # a lag in t3 alone starts at t3's own job
    _complete(client, "db.t2", [3000, 4000])
    tr = client.trace("db.t3")
    assert tr.origin_table == "db.t3" and tr.origin_job_id == "s3" and tr.lag_ms == 2000
