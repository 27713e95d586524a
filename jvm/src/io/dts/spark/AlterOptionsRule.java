package io.dts.spark;

import java.util.List;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.analysis.ResolvedTable;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.SetTableProperties;
import org.apache.spark.sql.catalyst.plans.logical.UnsetTableProperties;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.command.AlterTableSetPropertiesCommand;
import org.apache.spark.sql.execution.command.AlterTableUnsetPropertiesCommand;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@code ALTER TABLE db.t SET TBLPROPERTIES (...)} and {@code UNSET TBLPROPERTIES} on a
 * dts table change the table's own options ({@code Table.set_options} in the driver's
 * Python process, through {@link TablePlanner#alterOptions}), not only Spark's catalog
 * entry: dts's writers, the worker and other engines read the options from the table's
 * schema. A refused change (an option fixed at creation, an unknown key) fails the
 * statement with the table's message. Spark then records the properties in its catalog
 * as for any table. The rule may see one statement more than once (the analyzer runs to
 * a fixed point and turns the statement into a v1 command); a change already made is a
 * no-op on the Python side.
 */
public final class AlterOptionsRule extends Rule<LogicalPlan> {
    private final SparkSession session;

    public AlterOptionsRule(SparkSession session) {
        this.session = session;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        TablePlanner planner = NativeReads.plannerFor(session);
        if (planner == null) {
            return plan;
        }
        if (plan instanceof SetTableProperties set && set.table() instanceof ResolvedTable t) {
            planner.alterOptions(name(t), CollectionConverters.asJava(set.properties()), List.of());
        } else if (plan instanceof UnsetTableProperties unset
                && unset.table() instanceof ResolvedTable t) {
            planner.alterOptions(name(t), Map.of(), CollectionConverters.asJava(unset.propertyKeys()));
        } else if (plan instanceof AlterTableSetPropertiesCommand set && !set.isView()) {
            planner.alterOptions(
                    name(set.tableName()), CollectionConverters.asJava(set.properties()), List.of());
        } else if (plan instanceof AlterTableUnsetPropertiesCommand unset && !unset.isView()) {
            planner.alterOptions(
                    name(unset.tableName()), Map.of(), CollectionConverters.asJava(unset.propKeys()));
        }
        return plan;
    }

    private static String name(ResolvedTable table) {
        String[] namespace = table.identifier().namespace();
        String db = namespace.length == 0 ? "" : namespace[namespace.length - 1];
        return db + "." + table.identifier().name();
    }

    private String name(TableIdentifier ident) {
        String db = ident.database().isDefined()
                ? ident.database().get()
                : session.sessionState().catalog().getCurrentDatabase();
        return db + "." + ident.table();
    }
}
