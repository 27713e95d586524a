package io.dts.spark;

import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.FalseLiteral$;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@code dts_live_row(file_name, row_index)}: true unless the file's deletion vector holds
 * the row. Code-generated into Spark's whole-stage code as one call per row (no conversion
 * of the file name, no boxing): as a Java UDF the filter cost ~140 ns a row, more than
 * reading the row.
 */
public final class LiveRowFilter extends Expression {
    private static final long serialVersionUID = 1L;
    private final Expression fileName;
    private final Expression rowIndex;
    private final DeletionVectors vectors;

    public LiveRowFilter(Expression fileName, Expression rowIndex, DeletionVectors vectors) {
        this.fileName = fileName;
        this.rowIndex = rowIndex;
        this.vectors = vectors;
    }

    @Override
    public Seq<Expression> children() {
        return CollectionConverters.asScala(List.of(fileName, rowIndex)).toList();
    }

    @Override
    public boolean nullable() {
        return false;
    }

    @Override
    public DataType dataType() {
        return DataTypes.BooleanType;
    }

    @Override
    public String prettyName() {
        return "dts_live_row";
    }

    @Override
    public Object eval(InternalRow input) {
        UTF8String name = (UTF8String) fileName.eval(input);
        return vectors.isLive(name, (Long) rowIndex.eval(input));
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
        String ref = ctx.addReferenceObj("dtsVectors", vectors, DeletionVectors.class.getName());
        ExprCode name = fileName.genCode(ctx);
        ExprCode row = rowIndex.genCode(ctx);
        String code = name.code().toString() + "\n" + row.code().toString() + "\nboolean "
                + ev.value() + " = " + ref + ".isLive(" + name.value() + ", " + row.value() + ");";
        Seq<String> parts = CollectionConverters.asScala(List.of(code)).toList();
        Seq<JavaCode> inputs = CollectionConverters.asScala(List.<JavaCode>of()).toList();
        return ev.copy(new CodeBlock(parts, inputs), FalseLiteral$.MODULE$, ev.value());
    }

    @Override
    public Expression withNewChildrenInternal(IndexedSeq<Expression> children) {
        return new LiveRowFilter(children.apply(0), children.apply(1), vectors);
    }

    @Override
    public int productArity() {
        return 3;
    }

    @Override
    public Object productElement(int n) {
        switch (n) {
            case 0: return fileName;
            case 1: return rowIndex;
            case 2: return vectors.digest();
            default: throw new IndexOutOfBoundsException(String.valueOf(n));
        }
    }

    @Override
    public boolean canEqual(Object other) {
        return other instanceof LiveRowFilter;
    }
}
