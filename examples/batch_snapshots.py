"""Batch reads of snapshots: every commit is a snapshot you can read again (time travel).

Three commits to ``examples.batch_orders`` (a load, an upsert and a delete, a second
load), then reads of the latest and of older snapshots, by id, by barrier and by tag,
with pyarrow and with Spark's `dts` source.

    DTS_WAREHOUSE=./warehouse python examples/batch_snapshots.py
"""

from __future__ import annotations

from _common import ORDERS_SCHEMA, WAREHOUSE, fresh_table, orders, spark_session

TABLE = "examples.batch_orders"


def main() -> None:
    # a batch table needs no log tier: change-tracking=false skips Kafka entirely
    table = fresh_table(
        TABLE, ORDERS_SCHEMA, ["order_id"], {"bucket": "2", "change-tracking": "false"}
    )
    write = table.new_write(commit_user="examples")
    write.write(orders([(i, i % 3, 100 * i, "new") for i in range(1, 7)]))
    loaded = write.commit(barrier=1_000)
    write.write(orders([(1, 1, 150, "paid"), (2, 2, 200, "x")], kinds=["+U", "-D"]))
    changed = write.commit(barrier=2_000)
    write.write(orders([(i, i % 3, 100 * i, "new") for i in range(7, 10)]))
    latest = write.commit(barrier=3_000)
    write.close()
    table.create_tag("first-load", loaded.id)

    print("snapshots:", [(s.id, s.barrier, s.commit_kind) for s in table.snapshots()])
    assert table.read().num_rows == 8
    assert table.read(snapshot_id=loaded.id).num_rows == 6
    assert table.read(barrier=2_000).num_rows == 5
    assert table.read(tag="first-load").num_rows == 6
    changes = table.changes(loaded.id, changed.id).sort_by("order_id")
    print("changes between the first two snapshots:",
          changes.select(["order_id", "status", "_row_kind"]).to_pylist())  # fmt: skip

    spark = spark_session("examples-batch")
    try:
        reader = spark.read.format("dts").option("warehouse", WAREHOUSE)
        now = reader.load(TABLE)
        then = reader.option("snapshot-id", str(loaded.id)).load(TABLE)
        print(f"Spark: {now.count()} rows now (snapshot {latest.id}), "
              f"{then.count()} at snapshot {loaded.id}")  # fmt: skip
        assert (now.count(), then.count()) == (8, 6)
        paid = now.where("status = 'paid'").collect()
        assert [r.order_id for r in paid] == [1], paid
    finally:
        spark.stop()
    print("OK: the latest and the older snapshots read back as committed")


if __name__ == "__main__":
    main()
