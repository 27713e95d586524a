package io.dts.spark;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

/**
 * Plans a read of one dts table at its latest snapshot. Implemented in Python
 * (bridge.spark.by_name), called back through Py4J while Spark analyzes a query.
 */
public interface TablePlanner extends StreamPlanner {
    /** The analyzed plan reading table {@code name} ("db.t"), or null to keep Spark's own. */
    LogicalPlan plan(String name);

    /**
     * The analyzed plan of the dts read with these options returning only {@code columns}
     * (comma-separated; empty when the query needs none, as {@code count(*)}), or null.
     */
    LogicalPlan prune(java.util.Map<String, String> options, String columns);

    /**
     * The analyzed plan of the {@code format("dts")} batch read with these options as
     * Spark's own scans (a changes read of stored changelog files), or null to keep the
     * Python source.
     */
    LogicalPlan nativeRead(java.util.Map<String, String> options);

    /**
     * {@code ALTER TABLE name SET/UNSET TBLPROPERTIES}: set and remove the table's options
     * when {@code name} ("db.t") is a dts table exposed in this session (else nothing).
     * Throws (the table's message) when the table refuses the change.
     */
    void alterOptions(
            String name, java.util.Map<String, String> set, java.util.List<String> unset);
}
