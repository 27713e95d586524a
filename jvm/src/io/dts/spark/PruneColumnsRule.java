package io.dts.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import scala.Function1;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * Column pruning for the dts Python source. Runs after Spark's own column pruning (which
 * leaves a Project of the needed columns over the relation) and before scans are built:
 * {@code Project(needed, [Filter(c,)] RelationV2 dts)} gets a relation planned with the
 * option {@code columns=<needed>}; the Filter and the Project refer to its attributes,
 * and the Project's output keeps its old attribute ids.
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
            Filter filter = project.child() instanceof Filter f ? f : null;
            AttributeSet needed = project.references();
            if (filter != null) {
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
            if (!(fresh instanceof DataSourceV2Relation narrowed)) {
                return project;
            }
            Map<ExprId, Attribute> swap = new HashMap<>();
            for (AttributeReference old : CollectionConverters.asJava(relation.output())) {
                if (!needed.contains(old)) {
                    continue;
                }
                Attribute now = find(narrowed, old);
                if (now == null) {
                    return project;
                }
                swap.put(old.exprId(), now);
            }
            // the Filter stays right above the relation, where Spark's scan push-down
            // (V2ScanRelationPushDown) looks for filters to hand to the source
            LogicalPlan below = filter == null ? narrowed : new Filter(rewrite(filter.condition(), swap), narrowed);
            List<NamedExpression> list = new ArrayList<>();
            for (NamedExpression e : CollectionConverters.asJava(project.projectList())) {
                if (e instanceof AttributeReference a && swap.containsKey(a.exprId())) {
                    list.add(new Alias(swap.get(a.exprId()), a.name(), a.exprId(), a.qualifier(),
                            Option.apply(a.metadata()), CollectionConverters.asScala(new ArrayList<String>()).toList()));
                } else {
                    list.add((NamedExpression) rewrite((Expression) e, swap));
                }
            }
            return new Project(CollectionConverters.asScala(list).toList(), below);
        }

        private static Attribute find(DataSourceV2Relation relation, AttributeReference like) {
            for (AttributeReference a : CollectionConverters.asJava(relation.output())) {
                if (a.name().equalsIgnoreCase(like.name()) && a.dataType().sameType(like.dataType())) {
                    return a;
                }
            }
            return null;
        }

        private static Expression rewrite(Expression e, Map<ExprId, Attribute> swap) {
            return e.transform(new AbstractPartialFunction<Expression, Expression>() {
                @Override
                public boolean isDefinedAt(Expression x) {
                    return x instanceof AttributeReference a && swap.containsKey(a.exprId());
                }

                @Override
                @SuppressWarnings("unchecked")
                public <A1 extends Expression, B1> B1 applyOrElse(A1 x, Function1<A1, B1> fallback) {
                    if (x instanceof AttributeReference a && swap.containsKey(a.exprId())) {
                        return (B1) swap.get(a.exprId());
                    }
                    return fallback.apply(x);
                }
            });
        }
    }
}
