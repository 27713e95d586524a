"""`make soak`: dts's side of the pipeline benchmark (``bench.pipeline``) at one steady rate
for an hour, its storage lifecycle on (compaction, snapshot expiration, orphan cleanup,
Kafka retention), sampled every minute; a series that grows beyond its noise fails.

``settings`` holds the lifecycle settings, ``procs`` and ``disk`` read what a sample holds
(/proc, directories, table metadata), ``collect`` makes one sample, ``verdict`` judges a
series, ``oracle`` checks the final tables, ``report`` prints and writes the results.
"""
