"""``/metrics`` and ``/status`` on Faust's web server."""

from __future__ import annotations

from typing import Any

import faust
import orjson

from bridge.worker.metrics import WorkerMetrics
from bridge.worker.state.status import WorkerStatus


def attach_views(app: faust.App, metrics: WorkerMetrics, status: WorkerStatus) -> None:
    async def metrics_view(web: Any, request: Any) -> Any:
        body, content_type = metrics.exposition()
        return web.bytes(body, content_type=content_type.split(";")[0])

    async def status_view(web: Any, request: Any) -> Any:
        body = orjson.dumps(status.to_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        return web.bytes(body, content_type="application/json")

    app.page("/metrics")(metrics_view)
    app.page("/status")(status_view)
