"""A Spark driver for tests/e2e/test_secrets_never_shown.py: reads a table's log over SASL_SSL
two ways, with an event log and INFO logging on, and prints every plan it explains.

Its own process, because an event log is a SparkContext setting: the tests' shared session
(tests/conftest.py) cannot take one. The Kafka client settings come from
``$DTS_KAFKA_CONFIG``, as a user's job would take them:

- Spark's own Kafka source (``kafka_source_options``: a JAAS line among its options), in a
  batch read and a streaming read's plan;
- the dts source's log and hybrid tiers (their consumers in the Python workers read the
  same file).

INFO logging makes Kafka's Java clients print their whole configuration, so the output
the test searches holds every setting the clients were given.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bridge.spark.kafka_rows import changelog_rows, kafka_source_options
from bridge.spark.session import local_session
from bridge.tables import log_spec_for
from filestore import Catalog
from logstore.client_config import client_settings


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--warehouse", "--table", "--bootstrap", "--work", "--events"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    # uncompressed (Spark 4 writes zstd by default), so the test can search it
    conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": args.events}
    conf["spark.eventLog.compress"] = "false"
    spark = local_session("dts-secured-read", Path(args.work), kafka=True, conf=conf)
    spark.sparkContext.setLogLevel("INFO")
    try:
        table = Catalog(args.warehouse).get_table(args.table)
        spec = log_spec_for(table)
        options = kafka_source_options(args.bootstrap, spec.topic, client_settings())
        changes = changelog_rows(spark.read.format("kafka").options(**options).load(), spec)
        print(f"kafka source rows: {changes.count()}")
        changes.explain(extended=True)
        # a streaming read's plan names its source with its options (never started)
        spark.readStream.format("kafka").options(**options).load().explain(extended=True)

        for tier in ("log", "hybrid"):  # the hybrid tier: the snapshot, then the log after it
            stream = (
                spark.readStream.format("dts")
                .option("warehouse", args.warehouse)
                .option("tier", tier)
                .option("bootstrap", args.bootstrap)
                .load(args.table)
            )
            query = (
                stream.writeStream.format("memory")
                .queryName(f"{tier}_tier")
                .trigger(availableNow=True)
                .start()
            )
            if not query.awaitTermination(180):
                query.stop()
                sys.exit(f"the {tier}-tier stream did not drain within 180 s")
            if query.exception() is not None:
                sys.exit(f"the {tier}-tier stream failed: {query.exception()}")
            query.explain(extended=True)
            print(f"{tier} tier rows: {spark.table(f'{tier}_tier').count()}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
