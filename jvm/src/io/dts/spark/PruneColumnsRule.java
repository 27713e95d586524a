package io.dts.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import scala.Function1;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * Column pruning for the dts Python source. Runs after Spark's own column pruning (which
 * leaves a Project of the needed columns over the relation) and before scans are built:
 * {@code Project(needed, [Filter(c,)] RelationV2 dts)} gets a relation planned with the
 * option {@code columns=<needed>}, projected back onto the old attribute ids.
 */
public final class PruneColumnsRule extends Rule<LogicalPlan> {
    private final SparkSession session;

    public PruneColumnsRule(SparkSession session) {
        this.session = session;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        TablePlanner planner = NativeReads.plannerFor(session);
        return planner == null ? plan : plan.transformUp(new Prune(planner));
    }

    /** The dts source relation under {@code project} (through one Filter), else null. */
    static DataSourceV2Relation relationUnder(LogicalPlan plan) {
        if (!(plan instanceof Project project)) {
            return null;
        }
        LogicalPlan child = project.child();
        if (child instanceof Filter filter) {
            child = filter.child();
        }
        if (!(child instanceof DataSourceV2Relation relation) || relation.identifier().isDefined()) {
            return null;
        }
        boolean python = relation.table().getClass().getSimpleName().equals("PythonTable");
        return python && relation.table().name().equals("dts") ? relation : null;
    }

    private static final class Prune extends AbstractPartialFunction<LogicalPlan, LogicalPlan> {
        private final TablePlanner planner;

        Prune(TablePlanner planner) {
            this.planner = planner;
        }

        @Override
        public boolean isDefinedAt(LogicalPlan plan) {
            return relationUnder(plan) != null;
        }

        @Override
        @SuppressWarnings("unchecked")
        public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 plan, Function1<A1, B1> fallback) {
            DataSourceV2Relation relation = relationUnder(plan);
            if (relation == null) {
                return fallback.apply(plan);
            }
            return (B1) prune((Project) plan, relation);
        }

        private LogicalPlan prune(Project project, DataSourceV2Relation relation) {
            AttributeSet needed = project.references();
            if (project.child() instanceof Filter filter) {
                needed = needed.$plus$plus(filter.condition().references());
            }
            List<String> names = new ArrayList<>();
            for (AttributeReference a : CollectionConverters.asJava(relation.output())) {
                if (needed.contains(a)) {
                    names.add(a.name());
                }
            }
            if (names.size() == relation.output().size()) {
                return project;
            }
            LogicalPlan fresh = planner.prune(relation.options().asCaseSensitiveMap(), String.join(",", names));
            LogicalPlan narrowed = fresh == null ? null : NativeReadRule.keepAttributes(neededOf(relation, needed), fresh);
            if (narrowed == null) {
                return project;
            }
            if (project.child() instanceof Filter filter) {
                return project.withNewChildren(one(filter.withNewChildren(one(narrowed))));
            }
            return project.withNewChildren(one(narrowed));
        }

        private static List<AttributeReference> neededOf(DataSourceV2Relation relation, AttributeSet needed) {
            List<AttributeReference> out = new ArrayList<>();
            for (AttributeReference a : CollectionConverters.asJava(relation.output())) {
                if (needed.contains(a)) {
                    out.add(a);
                }
            }
            return out;
        }

        private static scala.collection.immutable.Seq<LogicalPlan> one(LogicalPlan plan) {
            return CollectionConverters.asScala(List.of(plan)).toList();
        }
    }
}
