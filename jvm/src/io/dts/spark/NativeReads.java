package io.dts.spark;

import java.util.Collections;
import java.util.Map;
import java.util.WeakHashMap;
import org.apache.spark.sql.SparkSession;

/** The planner each session installed (weakly held: a stopped session's entry goes with it). */
public final class NativeReads {
    private static final Map<SparkSession, TablePlanner> PLANNERS =
            Collections.synchronizedMap(new WeakHashMap<>());

    private NativeReads() {}

    public static void install(SparkSession session, TablePlanner planner) {
        PLANNERS.put(session, planner);
    }

    public static void uninstall(SparkSession session) {
        PLANNERS.remove(session);
    }

    public static boolean installed(SparkSession session) {
        return PLANNERS.containsKey(session);
    }

    static TablePlanner plannerFor(SparkSession session) {
        return PLANNERS.get(session);
    }
}
