"""`make bench-pipeline`: the seeds' pipeline (CDC orders -> orders -> two derived tables)
run by dts and by the stack a Delta expert stitches by hand (Spark's Kafka source, one
``foreachBatch`` MERGEing the three Delta tables), fed the same Debezium topic, each one's
highest sustained rate searched for.

``model`` holds the tables and their oracle, ``source`` the rate-controlled Debezium
producer, ``dts_side``, ``delta_side`` and ``paimon_side`` the pipelines (each a
subprocess with its own Spark; Paimon's in its own environment, ``paimon_job``),
``dts_probe``, ``delta_probe`` and ``paimon_probe`` their readers (each a process of its
own, sampling through ``probe``; the stitched ones installed apart, ``readers_apart``),
``search`` the rate search, ``report`` the figures.
"""
