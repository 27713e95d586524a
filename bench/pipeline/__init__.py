"""`make bench-pipeline`: the seeds' pipeline (CDC orders -> orders -> two derived tables)
run by dts and by the stack users stitch by hand (Spark's Kafka source, MERGE into Delta,
streams on Delta's change data feed), fed the same Debezium topic at rising rates.

``model`` holds the tables and their oracle, ``source`` the rate-controlled Debezium
producer, ``dts_side`` and ``delta_side`` the two pipelines (each a subprocess with its
own Spark), ``probe`` the per-second reader both sides share, ``report`` the figures.
"""
