package io.dts.spark;

import java.util.Map;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxFiles;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.streaming.Offset;
import org.apache.spark.sql.execution.streaming.Source;
import org.apache.spark.sql.execution.streaming.runtime.SerializedOffset;
import org.apache.spark.sql.types.StructType;
import scala.Option;

/**
 * A file-tier dts stream whose micro-batches are Spark's own scans: each batch is the
 * plan the Python planner builds for its offsets (the stored changelog files of the
 * snapshots it admits as a Parquet scan, see bridge.spark.native.scan), marked streaming.
 * Offsets, admission and Trigger.AvailableNow are the Python source's (FileStreamReader).
 */
final class ChangelogSource implements Source, SupportsTriggerAvailableNow {
    private final SparkSession session;
    private final StreamPlanner planner;
    private final String id;
    private final StructType schema;

    ChangelogSource(
            SparkSession session, StreamPlanner planner, String id, Map<String, String> options,
            StructType schema) {
        this.session = session;
        this.planner = planner;
        this.id = id;
        this.schema = schema;
        planner.streamOpen(id, options, schema.json());
    }

    @Override
    public StructType schema() {
        return schema;
    }

    @Override
    public Option<Offset> getOffset() {
        // Spark asks a source with admission control for latestOffset(start, limit) instead
        return Option.apply(offset(planner.streamLatestOffset(id, planner.streamInitialOffset(id), "all")));
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        String limit = planner.streamDefaultReadLimit(id);
        if (limit.startsWith("rows:")) {
            return ReadLimit.maxRows(Long.parseLong(limit.substring(5)));
        }
        if (limit.startsWith("barriers:")) {
            return ReadLimit.maxFiles(Integer.parseInt(limit.substring(9)));
        }
        return ReadLimit.allAvailable();
    }

    @Override
    public org.apache.spark.sql.connector.read.streaming.Offset latestOffset(
            org.apache.spark.sql.connector.read.streaming.Offset start, ReadLimit limit) {
        String from = start == null ? planner.streamInitialOffset(id) : start.json();
        return offset(planner.streamLatestOffset(id, from, describe(limit)));
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        planner.streamPrepareAvailableNow(id);
    }

    @Override
    public Dataset<Row> getBatch(Option<Offset> start, Offset end) {
        String from = start.isDefined() ? start.get().json() : planner.streamInitialOffset(id);
        LogicalPlan plan = planner.streamBatch(id, from, end.json(), SinkOrder.keyOrderNeeded(session));
        LogicalPlan streaming = plan.transformUp(new Partial<>(
                p -> p instanceof LogicalRelation,
                p -> {
                    LogicalRelation r = (LogicalRelation) p;
                    return r.copy(r.relation(), r.output(), r.catalogTable(), true, r.stream());
                }));
        Dataset<Row> batch = org.apache.spark.sql.classic.Dataset.ofRows(session, streaming);
        if (streaming.isStreaming()) {
            return batch;
        }
        // no file scan to mark (an empty batch, or the Python source's diff of a range
        // without stored changelog): Spark takes its rows as a streaming relation
        return session.internalCreateDataFrame(batch.queryExecution().toRdd(), batch.schema(), true);
    }

    @Override
    public void commit(Offset end) {}

    @Override
    public void stop() {
        planner.streamStop(id);
    }

    @Override
    public String toString() {
        return "dts(file tier, native micro-batches)";
    }

    private static Offset offset(String json) {
        return SerializedOffset.apply(json);
    }

    private static String describe(ReadLimit limit) {
        if (limit instanceof ReadMaxRows rows) {
            return "rows:" + rows.maxRows();
        }
        if (limit instanceof ReadMaxFiles files) {
            return "barriers:" + files.maxFiles();
        }
        return "all";
    }
}
