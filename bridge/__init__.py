"""bridge: what connects the tiers and the engines.

``import bridge as dts`` gives the user-facing entry points::

    dts.consistent_read(spark, ["db.t1", "db.t2"], warehouse=W)   # FLIP-276
    dts.consistent_read_tables(catalog, ["db.t1", "db.t2"])        # without Spark
    dts.create_table_as(spark, "db.t", df, primary_key=["id"])    # FLIP-305
    dts.extension_conf()                 # session confs: reads by name at native speed
    dts.register(spark, warehouse=W)     # the "dts" data source; W's tables by name (db.t)
    dts.refresh(spark)                   # tables created since become Spark tables too
    dts.table(spark, "db.t")             # a DataFrame read by Spark's Parquet reader where
                                         # no merge is needed

They are imported lazily so that ``dts`` commands that need neither Spark nor
the MetaService start quickly.
"""

from __future__ import annotations

from bridge.lazy_exports import lazy_exports

_EXPORTS = {
    "consistent_read": "bridge.consistency_read",
    "consistent_read_tables": "bridge.consistency_read",
    "create_table_as": "bridge.spark.ctas",
    "extension_conf": "bridge.spark.native.extension",
    "register": "bridge.spark.registration",
    "refresh": "bridge.spark.registration",
    "table": "bridge.spark.native.scan",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
