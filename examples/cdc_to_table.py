"""CDC into a table: change events go to the table's Kafka log, `dts worker` commits them.

Inserts, an update and a delete are written to the log of ``examples.cdc_orders`` in
two barriers (each a Kafka transaction); a `dts worker` consumes the log and commits
one FileStore snapshot per barrier; the table then reads back the final state.

    dts broker &                                   # or any Kafka: DTS_BOOTSTRAP
    DTS_WAREHOUSE=./warehouse python examples/cdc_to_table.py
"""

from __future__ import annotations

import subprocess
import sys
import time

from _common import BOOTSTRAP, ORDERS_SCHEMA, WAREHOUSE, fresh_table, orders

from bridge.tables import open_log_writer

TABLE = "examples.cdc_orders"
TIMEOUT_S = 120


def main() -> None:
    table = fresh_table(TABLE, ORDERS_SCHEMA, ["order_id"], {"bucket": "2"})
    # barrier_interval_s=None: we close barriers ourselves (a CDC connector would on a timer)
    with open_log_writer(table, BOOTSTRAP, barrier_interval_s=None) as log:
        log.write(orders([(1, 10, 500, "new"), (2, 11, 700, "new"), (3, 10, 900, "new")]))
        first = log.barrier()
        log.write(orders([(2, 11, 750, "paid"), (3, 10, 900, "new")], kinds=["+U", "-D"]))
        last = log.barrier()
    print(f"wrote barriers {first} and {last} to the log of {TABLE}")

    worker = subprocess.Popen(
        [sys.executable, "-m", "bridge", "worker", "--warehouse", WAREHOUSE,
         "--bootstrap", BOOTSTRAP, "--tables", TABLE, "--web-port", "0",
         "--group", "examples-cdc"],
    )  # fmt: skip
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while (snap := table.latest_snapshot()) is None or snap.barrier < last:
            if worker.poll() is not None:
                sys.exit(f"the worker exited with {worker.returncode}")
            if time.monotonic() > deadline:
                sys.exit(f"the worker did not commit barrier {last} within {TIMEOUT_S} s")
            time.sleep(0.5)
    finally:
        worker.terminate()
        worker.wait(timeout=60)

    rows = table.read().sort_by("order_id").to_pylist()
    print(f"{TABLE} at barrier {snap.barrier} (snapshot {snap.id}): {rows}")
    assert [(r["order_id"], r["status"]) for r in rows] == [(1, "new"), (2, "paid")], rows
    print(f"OK: {len(table.snapshots())} snapshots; the delete and the update were applied")


if __name__ == "__main__":
    main()
