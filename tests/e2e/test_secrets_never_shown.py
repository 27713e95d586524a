"""No password or token is ever shown (issue 44, item 5).

The secured pipeline runs end to end: a SASL_SSL broker with ACLs, the LogWriter, `dts
worker` reporting to a MetaService that needs a token, the `dts meta` CLI with the right
token and a wrong one, every `dts ... --help` with the secrets in the environment, and a
Spark driver reading the table's log over SASL_SSL (Spark's Kafka source and the dts log
tier) with an event log and INFO logging on, explaining its plans. Then every log file,
captured output, the worker's /status and /metrics bodies and the event log are searched
for each SCRAM password and token.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from bridge.cli import cli
from bridge.tables import log_spec_for
from logstore.acls import Acl, grant
from logstore.broker import EmbeddedBroker
from logstore.broker_security import BrokerSecurity
from logstore.writer import default_transactional_id
from tests.bridge.worker.secured import client_properties, worker_acls, writer_acls
from tests.bridge.worker.support import (
    ROOT,
    Changelog,
    create_table,
    latest_barrier,
    log_writer,
    produce,
    start_meta,
    start_worker,
    wait_for,
)

pytestmark = [pytest.mark.apache_kafka, pytest.mark.spark]


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    security = BrokerSecurity.generated("writer", "worker", "reader")
    with EmbeddedBroker(security=security, log_path=tmp_path / "broker.log") as b:
        yield b


def _helps(env: dict[str, str]) -> dict[str, str]:
    """`dts ... --help` of every command and group, with ``env`` set."""
    out: dict[str, str] = {}

    def walk(command: click.Command, path: list[str]) -> None:
        done = CliRunner().invoke(cli, [*path, "--help"], env=env)
        assert done.exit_code == 0, (path, done.output)
        out[" ".join(["dts", *path, "--help"])] = done.output
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])

    walk(cli, [])
    return out


def _get(url: str) -> str:
    return urllib.request.urlopen(url, timeout=10).read().decode()


def test_no_password_or_token_is_shown(
    secured: EmbeddedBroker,
    warehouse: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    assert secured.security is not None
    token, wrong_token = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
    table = create_table(warehouse, buckets=2)
    spec = log_spec_for(table)
    group = f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": secured.bootstrap, **secured.client_settings()})
    grant(admin, "writer", writer_acls(spec.topic, default_transactional_id(spec)))
    grant(admin, "worker", worker_acls(spec.topic, group))
    # least privilege: no group ACL (the dts source's consumers never join or commit one)
    grant(admin, "reader", [Acl("Topic", spec.topic, op) for op in ("DESCRIBE", "READ")])
    props = {
        u: client_properties(secured.client_settings, u, tmp_path) for u in secured.security.users
    }
    monkeypatch.setenv("DTS_KAFKA_CONFIG", str(props["writer"]))
    meta = start_meta(tmp_path, env={"DTS_META_TOKEN": token})
    shown: dict[str, str] = {}
    writer = log_writer(table, secured.bootstrap)
    worker = None
    try:
        log = Changelog(seed=5)
        barriers = produce(writer, log, barriers=2, rows_per_barrier=40)
        worker = start_worker(
            warehouse, secured.bootstrap, [table.name], group, tmp_path,
            env={"DTS_KAFKA_CONFIG": str(props["worker"]), "DTS_META_TOKEN": token},
            extra_args=["--meta-url", meta.url],
        )  # fmt: skip
        wait_for(lambda: latest_barrier(table) == barriers[-1], 90, "the barriers", worker)
        shown["/status"] = _get(f"http://127.0.0.1:{worker.web_port}/status")
        shown["/metrics"] = _get(f"http://127.0.0.1:{worker.web_port}/metrics")
        shown["MetaService /metrics"] = _get(f"{meta.url}/metrics")
        for name, tok in (("right", token), ("wrong", wrong_token)):
            done = CliRunner().invoke(
                cli, ["meta", "jobs", "list", "--meta-url", meta.url], env={"DTS_META_TOKEN": tok}
            )
            assert done.exit_code == (0 if name == "right" else 1), done.output
            shown[f"dts meta jobs list ({name} token)"] = done.output
    finally:
        writer.close(final_barrier=False)
        code = worker.stop() if worker is not None else 0
        meta.stop()
    assert code == 0, worker.tail() if worker is not None else ""

    events = tmp_path / "spark-events"
    events.mkdir()
    cmd = [sys.executable, "-m", "tests.e2e.secured_spark_read", "--warehouse", str(warehouse)]
    cmd += ["--table", table.name, "--bootstrap", secured.bootstrap]
    cmd += ["--work", str(tmp_path / "spark"), "--events", str(events)]
    env = {**os.environ, "DTS_KAFKA_CONFIG": str(props["reader"])}
    out, err = tmp_path / "spark-driver.out", tmp_path / "spark-driver.log"
    with out.open("w") as stdout, err.open("w") as stderr:
        driver = subprocess.run(cmd, stdout=stdout, stderr=stderr, timeout=280, cwd=ROOT, env=env)
    problems = [ln for ln in err.read_text().splitlines() if " ERROR " in ln or "Error" in ln]
    assert driver.returncode == 0, "\n".join(problems[-30:])
    shown["spark driver stdout (explain)"] = out.read_text()

    # a wrong password: the errors name the user, never the password tried
    wrong_password = secrets.token_urlsafe(18)
    bad = client_properties(
        secured.client_settings, "worker", tmp_path, **{"sasl.password": wrong_password}
    )
    worker_cmd = [sys.executable, "-m", "bridge", "--kafka-config", str(bad), "worker"]
    worker_cmd += ["--warehouse", str(warehouse), "--bootstrap", secured.bootstrap]
    worker_cmd += ["--tables", table.name, "--group", group, "--web-port", "0"]
    refused = subprocess.run(worker_cmd, capture_output=True, text=True, timeout=90, cwd=ROOT)
    assert refused.returncode != 0, refused.stdout
    shown["dts worker (wrong password)"] = refused.stdout + refused.stderr
    ingest = ["--kafka-config", str(bad), "ingest", "--from-topic", spec.topic]
    ingest += ["--table", table.name]
    ingest += ["--warehouse", str(warehouse), "--bootstrap", secured.bootstrap, "--idle-exit", "2"]
    refused_ingest = CliRunner().invoke(cli, ingest)
    assert refused_ingest.exit_code != 0, refused_ingest.output
    shown["dts ingest (wrong password)"] = refused_ingest.output
    assert "refused the credentials of user 'worker'" in shown["dts ingest (wrong password)"]

    everyone = secured.security.users
    shown |= _helps({"DTS_META_TOKEN": token, "DTS_KAFKA_SASL_PASSWORD": everyone["worker"]})
    shown["in-process logs"] = caplog.text
    for path in [*tmp_path.rglob("*.log"), *events.rglob("*")]:
        if path.is_file():
            shown[str(path.relative_to(tmp_path))] = path.read_text(errors="replace")

    for secret in [*everyone.values(), token, wrong_token, wrong_password]:
        leaks = [where for where, text in shown.items() if secret in text]
        assert not leaks, f"a secret is shown in {leaks}"
    # what was searched holds what it should: a search of empty text cannot pass
    counts = dict(re.findall(r"^(.*) rows: (\d+)$", shown["spark driver stdout (explain)"], re.M))
    assert all(int(counts[k]) > 0 for k in ("kafka source", "log tier", "hybrid tier")), counts
    assert "sasl.jaas.config = [hidden]" in shown["spark-driver.log"]  # Kafka's config dump
    assert "kafka.sasl.jaas.config=*********(redacted)" in shown["spark driver stdout (explain)"]
    event_log = "".join(t for w, t in shown.items() if w.startswith("spark-events"))
    assert f"Subscribe[{spec.topic}]" in event_log, event_log[:2000]
    assert table.name in shown["/status"] and "dts_" in shown["/metrics"]
    assert "dts_meta" in shown["MetaService /metrics"]
    assert f"worker:{group}:{table.name}" in shown["dts meta jobs list (right token)"]
    assert "--kafka-config" in shown["dts --help"]
