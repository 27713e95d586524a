package io.dts.spark;

import org.apache.spark.sql.SparkSessionExtensions;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * {@code spark.sql.extensions=io.dts.spark.DtsExtensions}: tables read by name
 * ({@code spark.table("db.t")}, {@code SELECT ... FROM db.t}) are planned like
 * {@code dts.table(spark, "db.t")}, so splits that need no merge are read by Spark's
 * own Parquet reader; and a read of the dts Python source that needs fewer columns than
 * the table has is re-planned with its {@code columns} option (PySpark's Python data
 * source API cannot prune columns itself); a file-tier stream's micro-batches are
 * planned as Spark's own scans of the stored changelog files ({@link NativeStreamRule});
 * {@code ALTER TABLE ... SET TBLPROPERTIES} changes a dts table's options
 * ({@link AlterOptionsRule}).
 */
public final class DtsExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectResolutionRule(NativeReadRule::new);
        extensions.injectResolutionRule(NativeStreamRule::new);
        extensions.injectResolutionRule(UpdateModeRule::new);
        extensions.injectResolutionRule(AlterOptionsRule::new);
        extensions.injectPreCBORule(PruneColumnsRule::new);
        return BoxedUnit.UNIT;
    }
}
