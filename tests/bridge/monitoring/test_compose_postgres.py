"""docker-compose.postgres.yml: a PostgreSQL source, Kafka Connect with Debezium (`dts
connect postgres`) and one `dts ingest`, over docker-compose.yml's stack. Validated with
`docker compose config` (no Docker engine here); what its services run is run outside
Docker by tests/e2e (the connect healthcheck against a real `dts connect postgres` too)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
import yaml

from bridge.cli import cli as dts_cli
from tests.bridge.monitoring.test_compose import COMPOSE, REPO, SECRETS, run_config

POSTGRES = REPO / "docker-compose.postgres.yml"
SOURCE_SECRETS = {**SECRETS, "SOURCE_DB_PASSWORD": "test-source-secret"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    run = run_config(SOURCE_SECRETS, tmp_path_factory.mktemp("compose"), (COMPOSE, POSTGRES))
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)  # type: ignore[no-any-return]


def _options(*path: str) -> set[str]:
    """The long options of a `dts` subcommand."""
    command: click.Command = dts_cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return {o for p in command.params for o in getattr(p, "opts", []) if o.startswith("--")}


def _given(args: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in args if a.startswith("--"))


def test_the_override_adds_a_source_connect_and_an_ingest(
    stack: dict,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    defaults = run_config(SECRETS, tmp_path, (COMPOSE,))
    assert defaults.returncode == 0, defaults.stderr
    base = set(json.loads(defaults.stdout)["services"])
    assert set(stack["services"]) == base | {"source-db", "connect", "ingest"}
    for name in ("source-db", "connect"):
        service = stack["services"][name]
        assert service["healthcheck"]["test"] and service["restart"] == "unless-stopped", name


def test_the_source_decodes_logically(stack: dict) -> None:  # type: ignore[type-arg]
    db = stack["services"]["source-db"]
    assert "wal_level=logical" in db["command"]
    assert db["environment"]["POSTGRES_PASSWORD"] == SOURCE_SECRETS["SOURCE_DB_PASSWORD"]


def test_connect_runs_dts_connect_postgres_with_the_password_kept_off_its_command(
    stack: dict,  # type: ignore[type-arg]
) -> None:
    connect = stack["services"]["connect"]
    assert connect["command"][:2] == ["connect", "postgres"]
    given = _given(connect["command"][2:])
    assert set(given) <= {o[2:] for o in _options("connect", "postgres")}
    assert given["dsn"] == "postgresql://app@source-db:5432/app"  # no password in it
    assert SOURCE_SECRETS["SOURCE_DB_PASSWORD"] not in " ".join(connect["command"])
    assert connect["environment"]["PGPASSWORD"] == SOURCE_SECRETS["SOURCE_DB_PASSWORD"]
    assert f"'http://127.0.0.1:{given['rest-port']}/connectors/dts-postgres/status'" in (
        " ".join(connect["healthcheck"]["test"])
    )
    depends = connect["depends_on"]
    assert {d: depends[d]["condition"] for d in depends} == {
        "kafka": "service_healthy",
        "source-db": "service_healthy",
    }


def test_the_ingest_reads_what_connect_writes(stack: dict) -> None:  # type: ignore[type-arg]
    ingest, connect = stack["services"]["ingest"], stack["services"]["connect"]
    assert ingest["command"][0] == "ingest"
    given = _given(ingest["command"][1:])
    assert set(given) <= {o[2:] for o in _options("ingest")}
    captured = _given(connect["command"][2:])
    assert given["topic-prefix"] == captured["topic-prefix"]
    sources = [pair.split("=")[0] for pair in given["tables"].split(",")]
    assert sources == captured["tables"].split(",")
    mounts = {(v["type"], v["source"], v["target"]) for v in ingest["volumes"]}
    assert ("volume", "warehouse", "/warehouse") in mounts
    assert ingest["depends_on"]["connect"]["condition"] == "service_healthy"


def test_no_secret_is_written_in_the_file() -> None:
    doc = yaml.safe_load(POSTGRES.read_text())
    for name, service in doc["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if re.search(r"PASSWORD|SECRET|TOKEN|API_KEY", key):
                assert str(value).startswith("${") and ":?" in str(value), f"{name}.{key}"


def test_it_refuses_to_start_without_the_source_password(tmp_path: Path) -> None:
    run = run_config(SECRETS, tmp_path, (COMPOSE, POSTGRES))
    assert run.returncode != 0
    assert "SOURCE_DB_PASSWORD" in run.stderr
    example = (REPO / ".env.example").read_text()
    assert re.search(r"^SOURCE_DB_PASSWORD=$", example, re.M)


def test_the_image_carries_the_connect_jars_the_tests_run() -> None:
    from logstore.broker import KAFKA_VERSION
    from logstore.connect import DEBEZIUM_VERSION

    text = (REPO / "Dockerfile").read_text()
    assert f"ARG KAFKA_VERSION={KAFKA_VERSION}\n" in text
    assert f"ARG DEBEZIUM_VERSION={DEBEZIUM_VERSION}\n" in text
    assert "deps/kafka-connect.pom.xml" in text and "DTS_CONNECT_JARS=" in text
