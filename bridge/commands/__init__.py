"""The ``dts`` subcommands, one module per group (broker, demo, exporter, ingest, meta,
table, worker): options and output only; the work is done by the packages they call.
``signals`` and ``heap`` hold what the long-running commands do to their process (SIGTERM
as Ctrl-C; start-up's objects frozen out of the collector's walks).

Imports within bridge: bridge.consistency_read, bridge.demo, bridge.exporter, bridge.meta, bridge.tables, bridge.worker.
"""
