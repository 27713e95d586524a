package io.dts.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
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
import scala.jdk.javaapi.CollectionConverters;

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
        return planner == null
                ? plan
                : plan.transformUp(new Partial<>(p -> relationUnder(p) != null, p -> prune(planner, (Project) p)));
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
        return isSourceRead(child) ? (DataSourceV2Relation) child : null;
    }

    /** Whether {@code plan} is a {@code format("dts")} read of the Python source. */
    static boolean isSourceRead(LogicalPlan plan) {
        return plan instanceof DataSourceV2Relation relation
                && relation.identifier().isEmpty()
                && NativeReads.isDtsSource(relation.table());
    }

    private static LogicalPlan prune(TablePlanner planner, Project project) {
        DataSourceV2Relation relation = relationUnder(project);
        Filter filter = project.child() instanceof Filter f ? f : null;
        AttributeSet needed = filter == null
                ? project.references()
                : project.references().$plus$plus(filter.condition().references());
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
        Map<ExprId, Attribute> swap = fresh instanceof DataSourceV2Relation narrowed
                ? swapFor(relation, narrowed, needed)
                : null;
        return swap == null ? project : reproject(project, filter, fresh, swap);
    }

    /** Old attribute id -> the narrowed relation's attribute, for every needed one; or null. */
    private static Map<ExprId, Attribute> swapFor(
            DataSourceV2Relation relation, DataSourceV2Relation narrowed, AttributeSet needed) {
        Map<ExprId, Attribute> swap = new HashMap<>();
        for (AttributeReference old : CollectionConverters.asJava(relation.output())) {
            if (needed.contains(old)) {
                Attribute now = find(narrowed, old);
                if (now == null) {
                    return null;
                }
                swap.put(old.exprId(), now);
            }
        }
        return swap;
    }

    /** {@code project} and its filter over {@code narrowed}; the output keeps its ids. */
    private static LogicalPlan reproject(
            Project project, Filter filter, LogicalPlan narrowed, Map<ExprId, Attribute> swap) {
        // the Filter stays right above the relation, where Spark's scan push-down
        // (V2ScanRelationPushDown) looks for filters to hand to the source
        LogicalPlan below = filter == null ? narrowed : new Filter(rewrite(filter.condition(), swap), narrowed);
        List<NamedExpression> list = new ArrayList<>();
        for (NamedExpression e : CollectionConverters.asJava(project.projectList())) {
            if (e instanceof AttributeReference a && swap.containsKey(a.exprId())) {
                list.add(NativeReadRule.aliasAs(swap.get(a.exprId()), a));
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
        return e.transform(new Partial<Expression>(
                x -> x instanceof AttributeReference a && swap.containsKey(a.exprId()),
                x -> swap.get(((AttributeReference) x).exprId())));
    }
}
