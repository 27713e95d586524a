package io.dts.spark;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.classic.ExpressionUtils;
import org.apache.spark.sql.functions;
import org.apache.spark.unsafe.types.UTF8String;
import org.roaringbitmap.RoaringBitmap;

/**
 * The deletion vectors of a read of dts data files (see {@code filestore.state.deletion_vectors}):
 * file name -> the row positions no longer current, from portable Roaring bitmaps as the
 * manifests store them. {@link #live} filters a Parquet read of the files on Parquet's
 * generated {@code _metadata.row_index} with {@link LiveRowFilter}, a code-generated
 * expression: the files are still read by Spark's vectorized reader, split across tasks,
 * with pushed filters, and the vectors travel with the plan to the executors.
 */
public final class DeletionVectors implements Serializable {
    private static final long serialVersionUID = 1L;
    private final HashMap<UTF8String, RoaringBitmap> deleted = new HashMap<>();
    private final String digest;
    // Rows of one file arrive together, in row order (each task has its own copy of this
    // object): remember the file's vector and its next deleted position, so a live row
    // costs a reference check and one comparison instead of a name compare and a bitmap
    // lookup (~25 ns a row, more than reading it).
    private transient UTF8String lastName;
    private transient UTF8String lastFile;
    private transient RoaringBitmap lastVector;
    private transient long checkedFrom;
    private transient long nextDeleted;

    DeletionVectors(Map<String, byte[]> vectors) {
        TreeMap<String, Integer> sizes = new TreeMap<>();
        for (Map.Entry<String, byte[]> e : vectors.entrySet()) {
            RoaringBitmap bitmap = new RoaringBitmap();
            try {
                bitmap.deserialize(ByteBuffer.wrap(e.getValue()));
            } catch (IOException ex) {
                throw new UncheckedIOException("deletion vector of " + e.getKey() + " is corrupt", ex);
            }
            deleted.put(UTF8String.fromString(e.getKey()), bitmap);
            sizes.put(e.getKey(), bitmap.getCardinality());
        }
        // two reads of one table at different snapshots must not be taken for the same plan
        digest = Integer.toHexString(sizes.toString().hashCode()) + ":" + sizes.size();
    }

    /** Whether row {@code rowIndex} of file {@code fileName} is live. */
    public boolean isLive(UTF8String fileName, long rowIndex) {
        if (fileName != lastName) {  // Spark passes one immutable name object per file
            lastName = fileName;
            if (lastFile == null || !fileName.equals(lastFile)) {
                lastFile = fileName.clone();
                lastVector = deleted.get(lastFile);
                nextDeleted = -1;  // nothing known of this file yet
            }
        }
        if (lastVector == null) {
            return true;
        }
        if (rowIndex >= checkedFrom && rowIndex < nextDeleted) {
            return true;  // no deleted row in [checkedFrom, nextDeleted)
        }
        long next = lastVector.nextValue((int) rowIndex);
        checkedFrom = rowIndex;
        nextDeleted = next < 0 ? Long.MAX_VALUE : next;
        return rowIndex != nextDeleted;
    }

    String digest() {
        return digest;
    }

    /**
     * {@code files} (a Parquet read of data files, before any projection) without the rows
     * that {@code vectors} (file name -> portable Roaring bitmap) delete.
     */
    public static Dataset<Row> live(Dataset<Row> files, Map<String, byte[]> vectors) {
        Expression name = ExpressionUtils.expression(functions.col("_metadata.file_name"));
        Expression row = ExpressionUtils.expression(functions.col("_metadata.row_index"));
        LiveRowFilter filter = new LiveRowFilter(name, row, new DeletionVectors(vectors));
        return files.filter(ExpressionUtils.column(filter));
    }

    @Override
    public String toString() {
        return "vectors " + digest;
    }
}
