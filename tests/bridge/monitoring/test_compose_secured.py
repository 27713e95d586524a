"""docker-compose.cluster-secured.yml: the three-node cluster of docker-compose.cluster.yml
secured as `dts broker --nodes 3 --secure` runs it. Validated with `docker compose config`
(no Docker engine here); each node's server.properties (the lines its entrypoint writes)
are held to ``BrokerSecurity.server_properties``, the settings the secured tests' brokers
run, and the ACLs the one-shot grants to the names the code gives topics, groups and
transactional ids."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from logstore.broker import server_properties
from logstore.broker_security import BrokerSecurity
from logstore.client_config import client_settings
from logstore.tls_files import TlsFiles
from tests.bridge.monitoring.test_compose import (
    CLUSTER,
    COMPOSE,
    DTS_SERVICES,
    KAFKA_NODES,
    REPO,
    SECRETS,
    run_config,
)

SECURED = REPO / "docker-compose.cluster-secured.yml"
KAFKA_SECRETS = {"KAFKA_ADMIN_PASSWORD": "test-admin-pw", "KAFKA_DTS_PASSWORD": "test-dts-pw"}
FILES = (COMPOSE, CLUSTER, SECURED)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    run = run_config({**SECRETS, **KAFKA_SECRETS}, tmp_path_factory.mktemp("compose"), FILES)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)  # type: ignore[no-any-return]


def _script(service: dict[str, Any]) -> str:
    """The service's entrypoint script with its environment filled in, as bash runs it
    (`config --format json` writes the file's $$ escapes back as $$)."""
    assert service["entrypoint"] == ["/bin/bash", "-c"]
    env = service["environment"]
    text = service["command"][0].replace("$$", "$")
    return re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), m.group(0)), text)


def _heredoc(script: str, path: str) -> dict[str, str]:
    m = re.search(rf'cat > "?{re.escape(path)}"? <<EOF\n(.*?)\nEOF\n', script, re.S)
    assert m is not None, f"no heredoc writing {path}"
    return dict(line.split("=", 1) for line in m.group(1).splitlines())


def test_the_secured_override_adds_its_certificates_and_acls(
    secured: dict[str, Any],
) -> None:
    assert set(secured["services"]) >= {*KAFKA_NODES, *DTS_SERVICES, "kafka-tls", "kafka-acls"}
    tls = secured["services"]["kafka-tls"]
    # the certificate names every node as the others and the dts services reach it
    assert f"python -m logstore.tls_files /tls/broker {' '.join(KAFKA_NODES)}" in tls["command"][0]
    for name in KAFKA_NODES:
        node = secured["services"][name]
        assert node["depends_on"]["kafka-tls"]["condition"] == "service_completed_successfully"
        assert "--command-config" in node["healthcheck"]["test"][1]  # SASL_SSL even there


def test_every_node_runs_the_settings_of_dts_broker_secure(secured: dict[str, Any]) -> None:
    admin_password, dts_password = KAFKA_SECRETS.values()
    security = BrokerSecurity({"admin": admin_password, "dts": dts_password})
    tls = TlsFiles(Path("/tls/broker/ca.pem"), Path("/tls/broker/broker-keystore.pem"))
    want = security.server_properties(9092, 9093, tls)
    # bound on 127.0.0.1 there, on every interface here, with HOST for clients on the host
    del want["listeners"], want["advertised.listeners"]
    want["listener.security.protocol.map"] += ",HOST:SASL_SSL"
    replicated = dict(
        line.split("=", 1)
        for line in server_properties(9092, 9093, Path("/d"), replicas=3).splitlines()
    )
    for name, node_id in KAFKA_NODES.items():
        script = _script(secured["services"][name])
        got = _heredoc(script, "$conf")
        assert {k: got.get(k) for k in want} == want, name
        assert got["listeners"] == "SASL_SSL://:9092,CONTROLLER://:9093,HOST://:29092"
        assert got["advertised.listeners"].startswith(f"SASL_SSL://{name}:9092,HOST://")
        # HOST's SCRAM needs a server login context, which holds no credentials
        host = got["listener.name.host.scram-sha-512.sasl.jaas.config"]
        assert host == "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        assert got["node.id"] == str(node_id)
        for key in ("default.replication.factor", "min.insync.replicas",
                    "transaction.state.log.min.isr", "offsets.topic.replication.factor"):  # fmt: skip
            assert got[key] == replicated[key], (name, key)
        # the SCRAM users are in the storage before the nodes authenticate to one another
        for arg in security.format_args()[1::2]:
            assert f'--add-scram "{arg}"' in script, (name, arg)


def test_the_dts_services_authenticate_as_dts_trusting_the_ca(secured: dict[str, Any]) -> None:
    for name in DTS_SERVICES:
        service = secured["services"][name]
        settings = client_settings(service["environment"])
        assert settings == {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "dts",
            "sasl.password": KAFKA_SECRETS["KAFKA_DTS_PASSWORD"],
            "ssl.ca.location": "/tls/ca.pem",
        }, name
        mounts = {(v["source"], v["target"], v.get("read_only")) for v in service["volumes"]}
        assert ("kafka-tls", "/tls", True) in mounts, name
        assert service["depends_on"]["kafka-acls"]["condition"] == "service_completed_successfully"


def test_the_acls_cover_the_names_dts_gives(secured: dict[str, Any]) -> None:
    from filestore.options import CoreOptions
    from logstore.spec import LogSpec
    from logstore.writer import default_transactional_id

    acls = _script(secured["services"]["kafka-acls"])
    granted = re.findall(r"^acl --(\S+) (\S+) ((?:--operation \w+ ?)+)$", acls, re.M)
    prefixes = {kind: (prefix, set(ops.split()[1::2])) for kind, prefix, ops in granted}
    topic = CoreOptions({}).log_topic("shop.orders")
    spec = LogSpec(topic, pa.schema([("id", pa.int64())]), ["id"], 1)
    names = {
        "topic": [topic, spec.dlq_topic],
        "group": ["dts-worker", f"dts-ingest-{topic}", "dts-spark-0123"],
        "transactional-id": [default_transactional_id(spec), f"dts-ingest-{topic}"],
    }
    for kind, examples in names.items():
        prefix, _ = prefixes[kind]
        assert all(n.startswith(prefix) for n in examples), (kind, prefix, examples)
    assert prefixes["topic"][1] == {"Create", "Describe", "Read", "Write"}
    assert prefixes["group"][1] == {"Read"}
    assert prefixes["transactional-id"][1] == {"Describe", "Write"}
    assert "super.users=User:admin" in _script(secured["services"]["kafka"])


def test_the_secured_cluster_refuses_to_start_without_its_passwords(tmp_path: Path) -> None:
    run = run_config(SECRETS, tmp_path, FILES)
    assert run.returncode != 0
    assert "KAFKA_ADMIN_PASSWORD" in run.stderr or "KAFKA_DTS_PASSWORD" in run.stderr
    example = (REPO / ".env.example").read_text()
    for var in KAFKA_SECRETS:
        assert re.search(rf"^{var}=$", example, re.M), var
