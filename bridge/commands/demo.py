"""`dts demo`: a FileStore walk-through (until the worker exists): create, upsert, delete,
read, time travel. Runs in a temporary warehouse that is removed afterwards, unless
``--warehouse`` names one to keep."""

from __future__ import annotations

import shutil
import tempfile
import time

import click
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console

from bridge.commands.table import print_arrow
from filestore import Catalog


def run_demo(warehouse: str, console: Console) -> None:
    cat = Catalog(warehouse)
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("dt", pa.string()),
            ("customer", pa.string()),
            ("amount", pa.float64()),
        ]
    )
    t = cat.create_table(
        "demo.orders", schema, primary_key=["id"], partition_by=["dt"], options={"bucket": "4"}
    )
    console.rule("[bold]1. create")
    console.print(
        f"table {t.name}: primary key {t.primary_key}, partitioned by {t.partition_keys}, 4 buckets"
    )
    w = t.new_write("demo")

    console.rule("[bold]2. insert")
    w.write(
        pa.table(
            {
                "id": [1, 2, 3, 4],
                "dt": ["2024-01-01", "2024-01-01", "2024-01-02", "2024-01-02"],
                "customer": ["ada", "bob", "cy", "dee"],
                "amount": [10.0, 20.0, 30.0, 40.0],
            }
        )
    )
    s1 = w.commit(barrier=1)
    assert s1 is not None
    print_arrow(console, t.read().sort_by("id"), f"snapshot {s1.id}")
    time.sleep(0.01)

    console.rule("[bold]3. upsert and delete")
    w.write(
        pa.table(
            {
                "id": [2, 3, 5],
                "dt": ["2024-01-01", "2024-01-02", "2024-01-02"],
                "customer": ["bob", "cy", "eve"],
                "amount": [25.0, None, 50.0],
                "_row_kind": ["+U", "-D", "+I"],
            }
        )
    )
    s2 = w.commit(barrier=2)
    assert s2 is not None
    console.print("upsert id 2 (amount 20 -> 25), delete id 3, insert id 5")
    print_arrow(console, t.read().sort_by("id"), f"snapshot {s2.id}")

    console.rule("[bold]4. read with a filter and a projection")
    print_arrow(
        console,
        t.read(columns=["id", "amount"], filter=pc.field("amount") > 20).sort_by("id"),
        "amount > 20",
    )

    console.rule("[bold]5. time travel")
    print_arrow(console, t.read(snapshot_id=s1.id).sort_by("id"), f"as of snapshot {s1.id}")
    print_arrow(console, t.read(barrier=1).sort_by("id"), "as of barrier 1")
    console.print("snapshots: " + ", ".join(f"{s.id} (barrier {s.barrier})" for s in t.snapshots()))
    w.close()


@click.command()
@click.option(
    "--warehouse",
    default=None,
    help="Keep the demo's warehouse here (default: a temp dir, removed).",
)
def demo(warehouse: str | None) -> None:
    """Walk through the FileStore: create, upsert, delete, read, time travel."""
    console = Console()
    keep = warehouse is not None
    path = warehouse or tempfile.mkdtemp(prefix="dts-demo-")
    try:
        run_demo(path, console)
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)
    console.rule("[bold green]done")
    console.print(f"warehouse kept at {path}" if keep else "temporary warehouse removed")
