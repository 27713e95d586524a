package io.dts.spark;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.streaming.Source;
import org.apache.spark.sql.sources.StreamSourceProvider;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Creates the {@link ChangelogSource} of a file-tier stream that {@link NativeStreamRule}
 * rewrote; the options name the session's planner ({@link NativeReads#PLANNER_OPTION}).
 */
public final class ChangelogSourceProvider implements StreamSourceProvider {
    @Override
    public Tuple2<String, StructType> sourceSchema(
            SQLContext context, Option<StructType> schema, String provider,
            scala.collection.immutable.Map<String, String> parameters) {
        return Tuple2.apply("dts", schema.get());
    }

    @Override
    public Source createSource(
            SQLContext context, String metadataPath, Option<StructType> schema, String provider,
            scala.collection.immutable.Map<String, String> parameters) {
        Map<String, String> options = new HashMap<>(CollectionConverters.asJava(parameters));
        String plannerId = options.remove(NativeReads.PLANNER_OPTION);
        TablePlanner planner = NativeReads.plannerById(plannerId);
        if (planner == null) {
            throw new IllegalStateException(
                    "the dts planner of this stream's session is gone (was dts.register(spark) "
                    + "run in this Python process?); restart the query from its checkpoint");
        }
        SparkSession session = (SparkSession) context.sparkSession();
        return new ChangelogSource(session, planner, metadataPath, options, schema.get());
    }
}
