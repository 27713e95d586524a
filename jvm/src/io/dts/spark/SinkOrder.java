package io.dts.spark;

import java.util.Set;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.streaming.runtime.StreamExecution;
import org.apache.spark.sql.execution.streaming.runtime.StreamingQueryWrapper;
import org.apache.spark.sql.streaming.StreamingQuery;

/**
 * Whether the streaming query now running a micro-batch on this thread needs each key's
 * changes in commit order within one task. An upserting sink (a dts table, a
 * foreachBatch MERGE, Kafka's per-key partitions) does, and so does a person reading a
 * memory or console sink; Spark's noop sink and its file sinks (rows appended to files)
 * do not, nor does a query that aggregates the stream; for them a batch spanning several
 * snapshots skips the shuffle by key that order costs (4x the read of the batch at 7.5M
 * changes). Unknown sinks, or a query that cannot be found, get the order: it is never
 * wrong, only slower.
 */
final class SinkOrder {
    // Spark's own sinks that neither merge by key nor show rows in order
    private static final Set<String> ORDER_FREE = Set.of(
            "org.apache.spark.sql.execution.datasources.noop.NoopTable$",
            "org.apache.spark.sql.execution.streaming.sinks.FileStreamSink");

    private SinkOrder() {}

    static boolean keyOrderNeeded(SparkSession session) {
        String id = session.sparkContext().getLocalProperty(StreamExecution.QUERY_ID_KEY());
        if (id == null) {
            return true;
        }
        StreamingQuery query;
        try {
            query = session.streams().get(id);
        } catch (IllegalArgumentException e) {
            return true;
        }
        if (!(query instanceof StreamingQueryWrapper wrapper)) {
            return true;
        }
        StreamExecution execution = wrapper.streamingQuery();
        // an aggregation's result does not depend on the order of its input rows (Spark
        // calls first/last non-deterministic): per-key order would be paid for nothing
        if (execution.logicalPlan().find(p -> p instanceof Aggregate).isDefined()) {
            return false;
        }
        Object sink = execution.sink();
        return sink == null || !ORDER_FREE.contains(sink.getClass().getName());
    }
}
