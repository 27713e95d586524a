package io.dts.spark;

import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.UUID;
import java.util.WeakHashMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.Table;

/** The planner each session installed (weakly held: a stopped session's entry goes with it). */
public final class NativeReads {
    /** The option naming a stream's planner: a query runs in a clone of its session. */
    static final String PLANNER_OPTION = "__dts_planner";

    private static final Map<SparkSession, TablePlanner> PLANNERS =
            Collections.synchronizedMap(new WeakHashMap<>());
    private static final Map<String, TablePlanner> BY_ID = new ConcurrentHashMap<>();
    private static final Map<TablePlanner, String> IDS =
            Collections.synchronizedMap(new IdentityHashMap<>());

    private NativeReads() {}

    public static void install(SparkSession session, TablePlanner planner) {
        String id = UUID.randomUUID().toString();
        BY_ID.put(id, planner);
        IDS.put(planner, id);
        PLANNERS.put(session, planner);
    }

    public static void uninstall(SparkSession session) {
        TablePlanner planner = PLANNERS.remove(session);
        if (planner != null) {
            BY_ID.remove(IDS.remove(planner));
        }
    }

    public static boolean installed(SparkSession session) {
        return PLANNERS.containsKey(session);
    }

    static TablePlanner plannerFor(SparkSession session) {
        return PLANNERS.get(session);
    }

    /** The id streams name their session's planner by, or null when none is installed. */
    static String idFor(SparkSession session) {
        TablePlanner planner = PLANNERS.get(session);
        return planner == null ? null : IDS.get(planner);
    }

    /** Whether {@code table} is the dts Python data source, read as {@code format("dts")}. */
    static boolean isDtsSource(Table table) {
        return table.getClass().getSimpleName().equals("PythonTable") && table.name().equals("dts");
    }

    static TablePlanner plannerById(String id) {
        return id == null ? null : BY_ID.get(id);
    }
}
