package io.dts.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.roaringbitmap.RoaringBitmap;

/**
 * Drops the rows of dts data files that their deletion vectors delete (see
 * {@code filestore.deletion_vectors}): a filter on Parquet's generated
 * {@code _metadata.row_index}, so the files are still read by Spark's vectorized
 * reader, split across tasks, with pushed filters. The vectors (portable Roaring
 * bitmaps, as the manifests store them) travel with the filter to the executors.
 */
public final class DeletionVectors implements UDF2<String, Long, Boolean> {
    private static final long serialVersionUID = 1L;
    private final HashMap<String, RoaringBitmap> deleted = new HashMap<>();
    // rows of one file arrive together: remember its vector instead of hashing every row
    private transient String lastFile;
    private transient RoaringBitmap lastVector;

    private DeletionVectors(Map<String, byte[]> vectors) {
        for (Map.Entry<String, byte[]> e : vectors.entrySet()) {
            RoaringBitmap bitmap = new RoaringBitmap();
            try {
                bitmap.deserialize(ByteBuffer.wrap(e.getValue()));
            } catch (IOException ex) {
                throw new UncheckedIOException("deletion vector of " + e.getKey() + " is corrupt", ex);
            }
            deleted.put(e.getKey(), bitmap);
        }
    }

    /** Whether row {@code rowIndex} of file {@code fileName} is live. */
    @Override
    public Boolean call(String fileName, Long rowIndex) {
        if (!fileName.equals(lastFile)) {
            lastFile = fileName;
            lastVector = deleted.get(fileName);
        }
        return lastVector == null || !lastVector.contains(rowIndex.intValue());
    }

    /**
     * {@code files} (a Parquet read of data files, before any projection) without the rows
     * that {@code vectors} (file name -> portable Roaring bitmap) delete.
     */
    public static Dataset<Row> live(Dataset<Row> files, Map<String, byte[]> vectors) {
        UserDefinedFunction isLive =
                functions.udf(new DeletionVectors(vectors), DataTypes.BooleanType);
        Column name = functions.col("_metadata.file_name");
        Column row = functions.col("_metadata.row_index");
        return files.filter(isLive.apply(name, row));
    }
}
