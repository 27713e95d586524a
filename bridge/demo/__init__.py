"""The one-command demo (`dts demo`): CDC sources, the worker, Spark streaming jobs,
consistent reads, time travel and atomic CTAS on an embedded broker and a local warehouse.

- ``model``: the tables and the derived-table definitions (Spark and the Arrow oracle)
- ``generator``: the CDC generator writing through the LogStore
- ``pipeline``: starting and stopping the broker, MetaService, worker and Spark jobs
- ``secure``: `dts demo --secure`: the secured broker's ACLs, the MetaService's TLS and
  token, and the client configuration every part takes from the environment
- ``checks``: the consistent reads, time travel and CTAS, and what they prove
- ``report``: the rich tables it prints
- ``runner``: the steps in order, with cleanup on every exit path

Imports within bridge: bridge.consistency_read, bridge.errors, bridge.meta, bridge.prometheus_server, bridge.spark, bridge.tables.
"""

from bridge.demo.outcome import DemoRun
from bridge.demo.runner import DemoOptions, run_demo

__all__ = ["DemoOptions", "DemoRun", "run_demo"]
