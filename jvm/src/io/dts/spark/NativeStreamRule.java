package io.dts.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.streaming.StreamingRelationV2;
import org.apache.spark.sql.catalyst.types.DataTypeUtils$;
import org.apache.spark.sql.execution.datasources.DataSource;
import org.apache.spark.sql.execution.datasources.DataSource$;
import org.apache.spark.sql.execution.streaming.runtime.StreamingRelation$;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A file-tier {@code readStream.format("dts")} becomes a {@link ChangelogSource}: its
 * micro-batches are then planned as Spark's own Parquet scans of the stored changelog
 * files instead of rows handed over by Python workers. The relation keeps its output
 * attributes; log and hybrid streams, and sessions without the planner or with
 * {@code spark.dts.native-streams=false}, are untouched.
 */
public final class NativeStreamRule extends Rule<LogicalPlan> {
    /** Set by the Python planner that plans streams (`dts.register`); "false" opts out. */
    static final String CONF = "spark.dts.native-streams";

    private final SparkSession session;

    public NativeStreamRule(SparkSession session) {
        this.session = session;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        String plannerId = NativeReads.idFor(session);
        if (plannerId == null || !"true".equalsIgnoreCase(session.conf().get(CONF, "false"))) {
            return plan;
        }
        return plan.resolveOperatorsUp(new Partial<>(
                NativeStreamRule::isFileStream, p -> replace((StreamingRelationV2) p, plannerId)));
    }

    static boolean isFileStream(LogicalPlan plan) {
        return plan instanceof StreamingRelationV2 relation
                && NativeReads.isDtsSource(relation.table())
                && "file".equalsIgnoreCase(relation.extraOptions().get("tier"));
    }

    private LogicalPlan replace(StreamingRelationV2 relation, String plannerId) {
        Map<String, String> options = new HashMap<>(relation.extraOptions().asCaseSensitiveMap());
        options.put(NativeReads.PLANNER_OPTION, plannerId);
        @SuppressWarnings("unchecked")
        Seq<Attribute> output = (Seq<Attribute>) (Seq<?>) relation.output();
        StructType schema = DataTypeUtils$.MODULE$.fromAttributes(output);
        Seq<String> none = CollectionConverters.asScala(new ArrayList<String>()).toList();
        DataSource source = DataSource$.MODULE$.apply(
                session,
                ChangelogSourceProvider.class.getName(),
                none,
                Option.apply(schema),
                none,
                Option.empty(),
                scala.collection.immutable.Map.from(CollectionConverters.asScala(options)),
                Option.empty(),
                DataSource$.MODULE$.apply$default$9());
        return StreamingRelation$.MODULE$.apply(source, "dts", output, relation.sourceIdentifyingName());
    }
}
