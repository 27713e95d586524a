"""The MetaService's database: its tables, engines and schema creation.

SQLite (a file under the warehouse) by default, PostgreSQL by URL. See
``bridge.meta.store`` for how several service instances share one database.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from bridge.meta.errors import InvalidRequest
from bridge.meta.models import SinkRole

REPORT_CHUNK = 500

metadata = sa.MetaData()
meta_lock = sa.Table(
    "dts_meta_lock",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.BigInteger, nullable=False),
)
jobs_t = sa.Table(
    "dts_jobs",
    metadata,
    sa.Column("job_id", sa.String(128), primary_key=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("description", sa.Text, nullable=False, default=""),
    sa.Column("registered_at_ms", sa.BigInteger, nullable=False),
    sa.Column("heartbeat_at_ms", sa.BigInteger, nullable=False),
    sa.Column("ended_at_ms", sa.BigInteger, nullable=True),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("heartbeat_timeout_ms", sa.BigInteger, nullable=False),
    # SinkRole of the job's sinks; added after the first release (see _add_role_column)
    sa.Column("role", sa.String(16), nullable=False, server_default=SinkRole.WRITER.value),
)
job_tables_t = sa.Table(
    "dts_job_tables",
    metadata,
    sa.Column("job_id", sa.String(128), primary_key=True),
    sa.Column("table_name", sa.String(255), primary_key=True),
    sa.Column("role", sa.String(8), primary_key=True),  # "source" | "sink"
    sa.Index("ix_dts_job_tables_table", "table_name"),
)
writers_t = sa.Table(
    "dts_writers",
    metadata,
    sa.Column("table_name", sa.String(255), primary_key=True),  # one running writer per table
    sa.Column("job_id", sa.String(128), nullable=False, index=True),
)
flushers_t = sa.Table(
    "dts_flushers",
    metadata,
    sa.Column("table_name", sa.String(255), primary_key=True),  # one running flusher per table
    sa.Column("job_id", sa.String(128), nullable=False, index=True),
)
barriers_t = sa.Table(
    "dts_table_barriers",
    metadata,
    sa.Column("table_name", sa.String(255), primary_key=True),
    sa.Column("barrier", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("snapshot_id", sa.BigInteger, nullable=True),
    sa.Column("completed_at_ms", sa.BigInteger, nullable=False),
    sa.Column("job_id", sa.String(128), nullable=True),
)


def _add_role_column(conn: Connection) -> None:
    """Databases created before roles existed lack ``dts_jobs.role``: their jobs are
    writers (the only role then). Idempotent; a lost race with another instance fails
    the transaction and ``_create_schema`` retries."""
    columns = {c["name"] for c in sa.inspect(conn).get_columns(jobs_t.name)}
    if "role" not in columns:
        conn.exec_driver_sql(
            f"ALTER TABLE {jobs_t.name} ADD COLUMN role VARCHAR(16) NOT NULL "
            f"DEFAULT '{SinkRole.WRITER.value}'"
        )


def default_url(warehouse: str | Path) -> str:
    """The embedded default: ``<warehouse>/_meta/meta.db``."""
    return f"sqlite:///{Path(warehouse).resolve() / '_meta' / 'meta.db'}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def make_engines(url: str) -> tuple[Engine, Engine]:
    """(write engine, read engine) for ``url``; the same engine twice on PostgreSQL."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:"):
            raise InvalidRequest("an in-memory SQLite database cannot be shared; give a file path")
        Path(database).parent.mkdir(parents=True, exist_ok=True)
        return _sqlite_engine(parsed, "BEGIN IMMEDIATE"), _sqlite_engine(parsed, "BEGIN")
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() in ("", "psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    engine = sa.create_engine(parsed, isolation_level="READ COMMITTED", pool_pre_ping=True)
    return engine, engine


def _sqlite_engine(url: sa.URL, begin: str) -> Engine:
    engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

    # pysqlite's own transaction handling starts transactions lazily (reads before the
    # first write run outside of it); take control so a transaction is a transaction.
    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=30000")
        # WAL + NORMAL survives a process crash; a power loss may drop the last reports,
        # which `dts meta rebuild` restores from the FileStore.
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql(begin)

    return engine


def create_schema(engine: Engine) -> None:
    """Create the tables if absent. Several instances may start at once on one
    database: creating is idempotent, and a lost race on the lock row or a table is
    harmless."""
    for attempt in range(3):
        try:
            with engine.begin() as conn:
                metadata.create_all(conn, checkfirst=True)
                _add_role_column(conn)
                if conn.execute(sa.select(meta_lock.c.id)).first() is None:
                    conn.execute(meta_lock.insert().values(id=1, version=0))
            return
        except sa.exc.DBAPIError:
            if attempt == 2:
                raise
            time.sleep(0.1 * (attempt + 1))


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
