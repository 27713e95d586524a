package io.dts.spark;

import java.util.Map;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

/**
 * Plans the micro-batches of a file-tier {@code format("dts")} stream (implemented in
 * Python by bridge.spark.native.extension, called back through Py4J from the query's thread).
 * Offsets are the Python source's own JSON, so checkpoints stay interchangeable; each
 * source is known by its checkpoint path.
 */
public interface StreamPlanner {
    /** Start planning the source {@code id} with these read options and Spark schema JSON. */
    void streamOpen(String id, Map<String, String> options, String schemaJson);

    /** The offset the stream starts after (fixed for the source's life). */
    String streamInitialOffset(String id);

    /** The default admission: "all", "rows:N" or "barriers:N". */
    String streamDefaultReadLimit(String id);

    /** The end offset of the next micro-batch from {@code start} under {@code limit}. */
    String streamLatestOffset(String id, String start, String limit);

    /** Trigger.AvailableNow: stop at what is committed now. */
    void streamPrepareAvailableNow(String id);

    /**
     * The analyzed plan of the rows in (start, end], in the stream schema's column order;
     * with {@code keyOrder}, each key's changes in one task in commit order.
     */
    LogicalPlan streamBatch(String id, String start, String end, boolean keyOrder);

    void streamStop(String id);
}
