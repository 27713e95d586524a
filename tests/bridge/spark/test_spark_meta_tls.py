"""A Spark job reaching an https MetaService through its own options: `meta.ca-file` (or the
session's `spark.dts.meta.ca-file`) and `meta.token`, with DTS_META_CA_FILE and DTS_META_TOKEN
unset. The MetaService is a real `dts meta serve --tls-cert` process with certificates made
at test time."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from bridge.meta.client import MetaClient
from tests.bridge.meta.tls_service import make_certs, serve_tls
from tests.bridge.spark.support import make_table, rows

pytestmark = pytest.mark.spark

TOKEN = "spark-job-token-for-tls-test"


def test_a_job_verifies_the_meta_service_with_its_ca_file_option(
    conf_spark: Any, warehouse: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from bridge.spark import register

    # the session's JVM, and the Python workers it forks, have this process's environment
    assert not {"DTS_META_CA_FILE", "DTS_META_TOKEN"} & set(os.environ)
    certs = make_certs(tmp_path)
    meta_root = tmp_path / "meta"
    meta_root.mkdir()
    table = make_table(warehouse, "db.tls")
    with serve_tls(meta_root, certs, TOKEN) as url:

        def write(barrier: int, **options: str) -> None:
            (
                conf_spark.createDataFrame(rows(3, start=barrier))
                .write.format("dts")
                .option("warehouse", str(warehouse))
                .option("meta.url", url)
                .option("meta.token", TOKEN)
                .option("barrier", str(barrier))
                .options(**options)
                .mode("append")
                .save("db.tls")
            )

        # without the CA: the system trust store refuses the certificate, saying what to set
        with pytest.raises(Exception, match="not trusted by the system trust store") as err:
            write(100)
        assert "option meta.ca-file" in str(err.value)
        assert table.latest_snapshot() is None  # refused before anything was written

        write(200, **{"meta.ca-file": str(certs.ca)})
        # the session default, as `spark.dts.meta.url` is one
        register(conf_spark, meta_ca_file=str(certs.ca))
        assert conf_spark.conf.get("spark.dts.meta.ca-file") == str(certs.ca)
        write(300)

        with MetaClient(url, token=TOKEN, ca_file=str(certs.ca)) as client:
            jobs = [j for j in client.list_jobs() if j.sinks == ["db.tls"]]
            reported = {b.barrier: b.snapshot_id for b in client.barriers("db.tls")}
    assert sorted((j.kind.value, j.state.value) for j in jobs) == [
        ("spark-batch", "finished"),
        ("spark-batch", "finished"),
    ]
    assert reported == {s.barrier: s.id for s in table.snapshots()}
    assert set(reported) == {200, 300}

    # the token option is a secret: Spark's redaction regex covers its key wherever Spark
    # shows a source's options, and the plans it explains do not show it
    assert re.search(conf_spark.conf.get("spark.redaction.regex"), "meta.token")
    capfd.readouterr()
    read = conf_spark.read.format("dts").option("warehouse", str(warehouse))
    read.option("meta.token", TOKEN).load("db.tls").explain(extended=True)
    stream = conf_spark.readStream.format("dts").option("warehouse", str(warehouse))
    stream.option("tier", "file").option("meta.token", TOKEN).load("db.tls").explain(True)
    plans = capfd.readouterr().out
    assert plans.count("== Physical Plan ==") == 2 and TOKEN not in plans, plans
