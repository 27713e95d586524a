"""The worker's process-wide gauges, read from its real exposition."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from prometheus_client.parser import text_string_to_metric_families

from bridge.worker.metrics import WorkerMetrics


def _arrow_bytes(metrics: WorkerMetrics) -> float:
    page = metrics.exposition()[0].decode()
    for family in text_string_to_metric_families(page):
        if family.name == "dts_worker_arrow_allocated_bytes":
            (sample,) = family.samples
            pool = pa.default_memory_pool().backend_name
            assert sample.labels == {"job": "job", "pool": pool}
            return sample.value
    raise AssertionError("dts_worker_arrow_allocated_bytes is not exposed")


def test_arrow_memory_is_read_when_scraped() -> None:
    metrics = WorkerMetrics("job")
    before = _arrow_bytes(metrics)
    # computed, so allocated in Arrow's pool (an array over numpy's memory is not)
    held = pc.multiply(pa.array(np.arange(2_000_000, dtype=np.int64)), 2)
    assert _arrow_bytes(metrics) - before >= held.nbytes
    del held
    assert _arrow_bytes(metrics) < before + 2_000_000 * 8
