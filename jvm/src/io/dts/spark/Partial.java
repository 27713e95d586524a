package io.dts.spark;

import java.util.function.Function;
import java.util.function.Predicate;
import scala.Function1;
import scala.runtime.AbstractPartialFunction;

/** A Scala partial function (what Catalyst's transforms take) from a test and a rewrite. */
final class Partial<T> extends AbstractPartialFunction<T, T> {
    private final Predicate<T> applies;
    private final Function<T, T> rewrite;

    Partial(Predicate<T> applies, Function<T, T> rewrite) {
        this.applies = applies;
        this.rewrite = rewrite;
    }

    @Override
    public boolean isDefinedAt(T x) {
        return applies.test(x);
    }

    @Override
    @SuppressWarnings("unchecked")
    public <A1 extends T, B1> B1 applyOrElse(A1 x, Function1<A1, B1> fallback) {
        return applies.test(x) ? (B1) rewrite.apply(x) : fallback.apply(x);
    }
}
