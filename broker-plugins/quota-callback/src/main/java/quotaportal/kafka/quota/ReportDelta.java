package quotaportal.kafka.quota;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.ToDoubleFunction;

/**
 * Which budgets a round's report carries (docs/internals/cluster-budgets-protocol.md, "Reports carry what moved"):
 * only those whose report moved materially since the engine last took one, so that Redis's cost follows the
 * demand that moves rather than every budget every second. The engine keeps every other budget's entry of this
 * broker alive while its rounds go on (its entry in {@code qb:{C}:brokers} is their lease), and tells it which of
 * those shares other brokers' reports moved.
 *
 * <p>A budget is reported when it is new to the engine, its scope field or B changed, its saturation flipped, or
 * its demand moved by more than {@link #DEMAND_STEP} of the larger of the share it enforces and the budget's floor
 * ({@code B * floor fraction}). Every budget is reported (a <em>whole</em> report) in the first round, after a failed
 * round (the script may have run and its answer been lost), after half a lease without a successful round (a
 * broker whose lease ran out lost its entries to a sweep), and when the engine asks ({@code resync}). A budget this
 * broker reported and no longer reports (its sensor is gone, or its value is no longer cluster-wide) is left
 * explicitly, so its share returns at once. Used by the background thread alone.
 */
final class ReportDelta {
    /**
     * A demand that moved by at most this fraction of its share (or of the budget's floor) is not reported: the
     * engine's targets add 20 % headroom to demand, so a move this small changes a share by less than the headroom
     * covers, and Kafka's windowed rate wanders about as much from second to second under steady load.
     */
    static final double DEMAND_STEP = 0.05;

    /** What one round reports: budgets (in the order they go to the script), budgets left, whether it is whole. */
    record Selection(List<BudgetCoordinator.Report> reports, List<String> leaving, boolean whole) {

        /** The script's KEYS: the scope, the brokers, then each budget reported, then each budget left. */
        List<String> keys(String prefix) {
            List<String> keys = new ArrayList<>(reports.size() + leaving.size() + 2);
            keys.add(prefix + "scope");
            keys.add(prefix + "brokers");
            for (BudgetCoordinator.Report r : reports) {
                keys.add(prefix + "b:" + r.sensor().sensor().budgetId());
            }
            for (String id : leaving) {
                keys.add(prefix + "b:" + id);
            }
            return keys;
        }

        /** The script's ARGV, with {@code now} ARGV[5] ("" = Redis's clock) and the scope version the broker holds. */
        List<String> args(BudgetSettings settings, String now, String scopeVersion) {
            List<String> args = new ArrayList<>(7 + 4 * (reports.size() + leaving.size()));
            args.add(Integer.toString(settings.brokerId()));
            args.add(Long.toString(settings.leaseMs()));
            args.add(number(settings.floorFraction()));
            args.add(number(settings.headroom()));
            args.add(now);
            args.add(scopeVersion);
            args.add(whole ? "1" : "0");
            for (BudgetCoordinator.Report r : reports) {
                args.add(r.scopeField());
                args.add(number(r.sensor().budget()));
                args.add(number(r.demand()));
                args.add(r.saturated() ? "1" : "0");
            }
            for (int i = 0; i < leaving.size(); i++) {
                args.addAll(List.of("", "", "", "-")); // the broker leaves the budget: its share returns at once
            }
            return args;
        }
    }

    /** A number as the script reads it (Lua's tonumber): integers without a fraction, else Java's shortest form. */
    static String number(double value) {
        if (value == Math.rint(value) && Math.abs(value) < 1e15) {
            return Long.toString((long) value);
        }
        return Double.toString(value);
    }

    private final Map<String, BudgetCoordinator.Report> sent = new HashMap<>(); // budget id -> as the engine holds it
    private boolean whole = true;
    private long lastOkMs = Long.MIN_VALUE;

    /**
     * The budgets to report now, of {@code current} (every cluster-wide sensor's report this round), with
     * {@code share} the share each enforces.
     */
    Selection select(List<BudgetCoordinator.Report> current, ToDoubleFunction<BudgetCoordinator.Report> share,
                     long nowMs, long leaseMs, double floorFraction) {
        boolean all = whole || lastOkMs == Long.MIN_VALUE || nowMs - lastOkMs > leaseMs / 2;
        List<BudgetCoordinator.Report> out = new ArrayList<>();
        Set<String> ids = new HashSet<>();
        for (BudgetCoordinator.Report r : current) {
            String id = r.sensor().sensor().budgetId();
            ids.add(id);
            BudgetCoordinator.Report last = sent.get(id);
            if (all || last == null || moved(last, r, share.applyAsDouble(r), floorFraction)) {
                out.add(r);
            }
        }
        List<String> leaving = new ArrayList<>();
        for (String id : sent.keySet()) {
            if (!ids.contains(id)) {
                leaving.add(id);
            }
        }
        return new Selection(out, leaving, all);
    }

    /** Whether a budget's report moved enough to send: see the class comment. */
    static boolean moved(BudgetCoordinator.Report last, BudgetCoordinator.Report now, double share,
                         double floorFraction) {
        if (!last.scopeField().equals(now.scopeField()) || last.sensor().budget() != now.sensor().budget()
                || !last.sensor().entity().equals(now.sensor().entity()) || last.saturated() != now.saturated()) {
            return true;
        }
        double step = DEMAND_STEP * Math.max(share, now.sensor().budget() * floorFraction);
        return Math.abs(now.demand() - last.demand()) > step;
    }

    /**
     * The engine took the selection: {@code answered} holds, per reported budget, whether it got a share ("" = not
     * cluster-wide: the engine deleted the budget, nothing of it is held); {@code resync} asks for a whole report.
     */
    void accepted(Selection selection, List<Boolean> answered, boolean resync, long nowMs) {
        for (int i = 0; i < selection.reports().size(); i++) {
            BudgetCoordinator.Report r = selection.reports().get(i);
            String id = r.sensor().sensor().budgetId();
            if (answered.get(i)) {
                sent.put(id, r);
            } else {
                sent.remove(id);
            }
        }
        for (String id : selection.leaving()) {
            sent.remove(id);
        }
        whole = resync;
        lastOkMs = nowMs;
    }

    /** A round failed: whether the script ran is unknown, so the next report is whole. */
    void failed() {
        whole = true;
    }

    /** The report the engine holds of a budget (null: none). */
    BudgetCoordinator.Report sent(String budgetId) {
        return sent.get(budgetId);
    }
}
