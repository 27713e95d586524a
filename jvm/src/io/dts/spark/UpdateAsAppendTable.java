package io.dts.spark;

import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The dts sink of an update-mode stream (see {@link UpdateModeRule}): the same table,
 * whose write builder takes update mode as an upserting append and tells the Python sink
 * so ({@value #OUTPUT_MODE_OPTION} = update) for its primary-key check.
 */
final class UpdateAsAppendTable implements SupportsWrite {
    /** Read by bridge.spark.source (options starting "__" are Spark's and ours, not the user's). */
    static final String OUTPUT_MODE_OPTION = "__dts_output_mode";

    private final SupportsWrite table;

    UpdateAsAppendTable(SupportsWrite table) {
        this.table = table;
    }

    @Override
    public String name() {
        return table.name();
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
        return table.schema();
    }

    @Override
    public Column[] columns() {
        return table.columns();
    }

    @Override
    public Transform[] partitioning() {
        return table.partitioning();
    }

    @Override
    public Map<String, String> properties() {
        return table.properties();
    }

    @Override
    public Set<TableCapability> capabilities() {
        return table.capabilities();
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
        Map<String, String> options = new HashMap<>(info.options().asCaseSensitiveMap());
        options.put(OUTPUT_MODE_OPTION, "update");
        return new Builder(table.newWriteBuilder(new Info(info, new CaseInsensitiveStringMap(options))));
    }

    private record Builder(WriteBuilder builder) implements SupportsStreamingUpdateAsAppend {
        @Override
        public Write build() {
            return builder.build();
        }
    }

    private record Info(LogicalWriteInfo info, CaseInsensitiveStringMap options)
            implements LogicalWriteInfo {
        @Override
        public String queryId() {
            return info.queryId();
        }

        @Override
        public StructType schema() {
            return info.schema();
        }

        @Override
        public Optional<StructType> rowIdSchema() {
            return info.rowIdSchema();
        }

        @Override
        public Optional<StructType> metadataSchema() {
            return info.metadataSchema();
        }
    }
}
