package io.dts.spark;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.streaming.WriteToStream;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.streaming.OutputMode;

/**
 * {@code outputMode("update")} into a dts table. Spark asks an update-mode sink's write
 * builder to be {@code SupportsStreamingUpdateAsAppend}, which PySpark's Python data
 * source builder is not, so Spark refused the mode. The dts sink upserts each row by the
 * table's primary key, which is what update mode needs: a micro-batch's changed rows
 * (an aggregation's updated groups) replace their keys' rows, and the groups that did
 * not change are not written again as in complete mode. The rule wraps the sink
 * ({@link UpdateAsAppendTable}); the Python sink then refuses a table without a primary
 * key, where appended rows would pile up.
 */
public final class UpdateModeRule extends Rule<LogicalPlan> {
    public UpdateModeRule(SparkSession session) {}

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (!(plan instanceof WriteToStream write)
                || !OutputMode.Update().equals(write.outputMode())
                || !NativeReads.isDtsSource(write.sink())
                || !(write.sink() instanceof SupportsWrite sink)) {
            return plan;
        }
        return write.copy(
                write.name(),
                write.sinkName(),
                write.resolvedCheckpointLocation(),
                new UpdateAsAppendTable(sink),
                write.outputMode(),
                write.deleteCheckpointOnStop(),
                write.inputQuery(),
                write.catalogAndIdent(),
                write.catalogTable());
    }
}
