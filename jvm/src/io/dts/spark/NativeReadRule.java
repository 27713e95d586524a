package io.dts.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Replaces the read of a catalog table backed by a per-table dts Python source
 * (provider {@code dts.<db>.<table>}) with the plan its session's {@link TablePlanner}
 * returns. The replacement keeps the relation's attribute ids, so operators already
 * resolved against it stay valid. Writes are untouched: a write command's target is not
 * one of its children. A {@code format("dts")} read the planner can serve with Spark's
 * own scans (a changes read of stored changelog files) is replaced the same way.
 */
public final class NativeReadRule extends Rule<LogicalPlan> {
    static final String PROVIDER_PREFIX = "dts.";
    private final SparkSession session;

    public NativeReadRule(SparkSession session) {
        this.session = session;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        TablePlanner planner = NativeReads.plannerFor(session);
        if (planner == null) {
            return plan;
        }
        return plan.resolveOperatorsUp(new Partial<>(
                p -> tableName(p) != null || PruneColumnsRule.isSourceRead(p),
                p -> tableName(p) != null ? replace(planner, p) : replaceSourceRead(planner, p)));
    }

    /** A {@code format("dts")} read as the planner plans it natively, or the read itself. */
    static LogicalPlan replaceSourceRead(TablePlanner planner, LogicalPlan plan) {
        DataSourceV2Relation relation = (DataSourceV2Relation) plan;
        LogicalPlan fresh;
        try {
            fresh = planner.nativeRead(relation.options().asCaseSensitiveMap());
        } catch (RuntimeException e) {
            // a planner of an older dts (without this call) or a broken callback: the
            // Python source still reads it, and reports any error of the read itself
            return relation;
        }
        LogicalPlan replaced = fresh == null ? null : keepAttributes(
                CollectionConverters.asJava(relation.output()), fresh);
        return replaced == null ? relation : replaced;
    }

    /** The read of {@code relation} as the planner plans it, or the relation itself. */
    static LogicalPlan replace(TablePlanner planner, LogicalPlan relation) {
        LogicalPlan fresh = planner.plan(tableName(relation));
        LogicalPlan replaced = fresh == null ? null : keepAttributes(
                CollectionConverters.asJava(((DataSourceV2Relation) relation).output()), fresh);
        return replaced == null ? relation : replaced;
    }

    /** {@code value} named as {@code as}, with its attribute id, qualifier and metadata. */
    static Alias aliasAs(Expression value, AttributeReference as) {
        Seq<String> noKeys = CollectionConverters.asScala(new ArrayList<String>()).toList();
        return new Alias(value, as.name(), as.exprId(), as.qualifier(), Option.apply(as.metadata()), noKeys);
    }

    /** "db.t" when {@code plan} reads a dts table by name, else null. */
    static String tableName(LogicalPlan plan) {
        if (!(plan instanceof DataSourceV2Relation relation) || relation.identifier().isEmpty()) {
            return null;
        }
        if (!relation.table().getClass().getSimpleName().equals("PythonTable")) {
            return null;
        }
        String provider = relation.table().name();
        return provider.startsWith(PROVIDER_PREFIX) ? provider.substring(PROVIDER_PREFIX.length()) : null;
    }

    /** {@code fresh} projected onto {@code wanted} (same names, ids, order), or null. */
    static LogicalPlan keepAttributes(List<AttributeReference> wanted, LogicalPlan fresh) {
        List<Attribute> available = CollectionConverters.asJava(fresh.output());
        List<NamedExpression> projection = new ArrayList<>();
        for (AttributeReference want : wanted) {
            Attribute have = available.stream()
                    .filter(a -> a.name().equalsIgnoreCase(want.name()))
                    .findFirst()
                    .orElse(null);
            if (have == null || !have.dataType().sameType(want.dataType())) {
                return null; // the table changed under the catalog entry: keep Spark's own read
            }
            projection.add(aliasAs(have, want));
        }
        return new Project(CollectionConverters.asScala(projection).toList(), fresh);
    }
}
