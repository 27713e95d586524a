package io.dts.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import scala.Function1;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * Replaces the read of a catalog table backed by a per-table dts Python source
 * (provider {@code dts.<db>.<table>}) with the plan its session's {@link TablePlanner}
 * returns. The replacement keeps the relation's attribute ids, so operators already
 * resolved against it stay valid. Writes are untouched: a write command's target is not
 * one of its children.
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
        return plan.resolveOperatorsUp(new Replace(planner));
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
            Seq<String> noKeys = CollectionConverters.asScala(new ArrayList<String>()).toList();
            projection.add(new Alias(have, want.name(), want.exprId(), want.qualifier(),
                    Option.apply(want.metadata()), noKeys));
        }
        return new Project(CollectionConverters.asScala(projection).toList(), fresh);
    }

    private static final class Replace extends AbstractPartialFunction<LogicalPlan, LogicalPlan> {
        private final TablePlanner planner;

        Replace(TablePlanner planner) {
            this.planner = planner;
        }

        @Override
        public boolean isDefinedAt(LogicalPlan plan) {
            return tableName(plan) != null;
        }

        @Override
        @SuppressWarnings("unchecked")
        public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 plan, Function1<A1, B1> fallback) {
            String name = tableName(plan);
            if (name == null) {
                return fallback.apply(plan);
            }
            LogicalPlan fresh = planner.plan(name);
            LogicalPlan replaced = fresh == null ? null : keepAttributes(
                    CollectionConverters.asJava(((DataSourceV2Relation) plan).output()), fresh);
            return (B1) (replaced == null ? plan : replaced);
        }
    }
}
