"""`dts demo --secure` end to end, as a user runs it: the broker on SASL_SSL (SCRAM-SHA-512,
certificates made at start, ACLs enforced), the MetaService over TLS with a token, every
part configured through DTS_KAFKA_CONFIG, DTS_META_CA_FILE and DTS_META_TOKEN; its checks
pass as in plaintext, and neither the generated password nor the token appears in its
output or in anything the run kept (logs, Spark's files, checkpoints, warehouse, report)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from bridge.demo.report import EXPLORE_END
from tests.bridge.demo.runs import (
    assert_nothing_left,
    demo_env,
    interrupt,
    start_demo,
    tail,
    wait_for_output,
)

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.kafka, pytest.mark.apache_kafka]


def _check_what_runs(output: str) -> None:
    """While it runs: Kafka refuses a plaintext client and lets the demo's principal do only
    what its ACLs allow; the MetaService answers only over TLS, with the token."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    from bridge.meta.client import MetaClient
    from bridge.meta.errors import MetaTlsError, Unauthorized

    broker = re.search(r"broker\s+(127\.0\.0\.1:\d+)", output)
    meta = re.search(r"MetaService\s+(https://127\.0\.0\.1:\d+)", output)
    config = re.search(r"export DTS_KAFKA_CONFIG=(\S+) DTS_META_CA_FILE=(\S+) ", output)
    assert broker and meta and config, tail(output)
    props, ca = _properties(Path(config.group(1))), config.group(2)
    token = (Path(config.group(1)).parent / "meta-token").read_text().strip()

    plain = AdminClient({"bootstrap.servers": broker.group(1), "log_level": 0})
    with pytest.raises(KafkaException):
        plain.list_topics(timeout=5)
    dts = AdminClient({"bootstrap.servers": broker.group(1), "log_level": 0, **props})
    assert {"dts.demo.orders", "dts.demo.customers"} <= set(dts.list_topics(timeout=30).topics)
    (refused,) = dts.create_topics([NewTopic("not-the-demos", 1, 1)]).values()
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        refused.result(timeout=30)

    with MetaClient(meta.group(1), token=token) as untrusted, pytest.raises(MetaTlsError):
        untrusted.list_jobs()
    with MetaClient(meta.group(1), ca_file=ca) as anonymous, pytest.raises(Unauthorized):
        anonymous.list_jobs()
    with MetaClient(meta.group(1), ca_file=ca, token=token) as client:
        kinds = {j.kind.value for j in client.list_jobs()}
    assert {"worker", "spark-streaming"} <= kinds


def _properties(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k: v for k, v in pairs}


@pytest.mark.timeout(600)
def test_the_secured_demo_passes_its_checks_and_shows_no_secret(tmp_path: Path) -> None:
    run_id = uuid.uuid4().hex
    out = tmp_path / "demo.out"
    args = ["--secure", "--stream-seconds", "1", "--keep-running"]
    proc = start_demo(args, demo_env(tmp_path / "tmp", run_id), out)
    try:
        wait_for_output(proc, out, EXPLORE_END, 480)
        _check_what_runs(out.read_text(errors="replace"))
    finally:
        code = interrupt(proc)
    output = out.read_text(errors="replace")
    assert code == 0, tail(output)

    # secured, and said where the client settings are
    assert "secured: a SASL_SSL listener (SCRAM-SHA-512)" in output
    m = re.search(r"DTS_KAFKA_CONFIG=(\S+), DTS_META_CA_FILE=(\S+) and DTS_META_TOKEN", output)
    assert m, tail(output)
    props, ca = _properties(Path(m.group(1))), Path(m.group(2))
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.username"] == "dts"
    assert props["sasl.mechanism"] == "SCRAM-SHA-512" and props["ssl.ca.location"] == str(ca)
    assert ca.read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert re.search(r"MetaService\s+.*https://127\.0\.0\.1:\d+", output), tail(output)
    # the same checks as the plaintext demo
    assert re.search(r"strong consistent read at barrier (\d+): agreed", output), tail(output)
    assert "Time travel: demo.customers at barrier" in output
    assert "CTAS table demo.top_customers present with 5 rows" in output
    assert "table visible: no; staging left: nothing" in output
    assert "Ctrl-C: stopping the demo" in output

    kept = re.search(r"kept in (\S+): logs/", output)
    assert kept, tail(output)
    run_dir = Path(kept.group(1))
    secure = run_dir / "secure"
    assert Path(m.group(1)).parent == secure and (secure.stat().st_mode & 0o077) == 0
    logs = run_dir / "logs"
    meta_log = (logs / "metaservice.log").read_text(errors="replace")
    assert re.search(r"listening on https://127\.0\.0\.1:\d+ .*bearer token", meta_log), meta_log

    password = props["sasl.password"]
    token = (secure / "meta-token").read_text().strip()
    assert len(password) >= 20 and len(token) >= 20
    searched = {"demo output": output.encode()}
    for path in run_dir.rglob("*"):
        if path.is_file() and secure not in path.parents:
            searched[str(path.relative_to(run_dir))] = path.read_bytes()
    assert any(w.startswith("logs/") for w in searched) and any("spark" in w for w in searched)
    for secret in (password, token):
        leaks = [where for where, data in searched.items() if secret.encode() in data]
        assert not leaks, f"a secret is shown in {leaks}"
    assert_nothing_left(run_id, output, tmp_path / "tmp")
