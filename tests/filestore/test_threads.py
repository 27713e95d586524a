"""The FileStore's one pool of threads: kept across calls, never waiting on itself, and
a forked child's own."""

from __future__ import annotations

import os
import threading

from filestore.threads import parallel_map


def _thread(_: object) -> tuple[int, str]:
    t = threading.current_thread()
    return t.ident or 0, t.name


def test_results_come_in_order_from_the_same_threads_call_after_call() -> None:
    assert parallel_map(lambda x: x * x, range(50)) == [x * x for x in range(50)]
    seen = {ident for _ in range(100) for ident, _name in parallel_map(_thread, range(8))}
    # a pool per call would have started up to 200 threads
    assert 1 <= len(seen) <= (os.cpu_count() or 1)
    assert all(name.startswith("filestore") for _i, name in parallel_map(_thread, range(4)))


def test_one_item_runs_in_the_callers_thread() -> None:
    assert parallel_map(_thread, [0]) == [_thread(0)]
    assert parallel_map(_thread, []) == []


def test_work_submitted_from_the_pools_own_threads_runs_there() -> None:
    """Every pool thread waiting on tasks queued behind it would wait for ever."""

    def outer(i: int) -> list[tuple[int, str]]:
        here = _thread(i)
        inner = parallel_map(_thread, range(4))
        assert set(inner) == {here}  # inline, in the pool thread that asked
        return inner

    done: list[object] = []
    worker = threading.Thread(
        target=lambda: done.append(parallel_map(outer, range(4 * (os.cpu_count() or 1))))
    )
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive() and len(done) == 1


def test_a_forked_child_starts_a_pool_of_its_own() -> None:
    parallel_map(_thread, range(4))  # the parent's pool exists
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's threads are not here
        try:
            ok = parallel_map(lambda x: x + 1, range(8)) == list(range(1, 9))
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1" and status == 0
