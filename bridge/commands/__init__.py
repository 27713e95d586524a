"""The ``dts`` subcommands, one module per group (broker, demo, exporter, ingest, meta,
table, worker): options and output only; the work is done by the packages they call.

Imports within bridge: bridge.demo, bridge.exporter, bridge.meta, bridge.tables, bridge.worker.
"""
