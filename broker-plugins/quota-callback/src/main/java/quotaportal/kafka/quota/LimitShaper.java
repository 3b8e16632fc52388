package quotaportal.kafka.quota;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;

/**
 * How a sensor's share becomes the limit Kafka enforces, where Kafka's windowed rate would otherwise make the share
 * mean something else: the drain hold ({@link #drained}) and the window ramp ({@link #ramped}). Called by the
 * {@link BudgetCoordinator}'s round, one thread at a time.
 */
final class LimitShaper {
    private final BudgetSettings settings;
    /** Per sensor whose window measures something: since when (a round before the first that saw it fill). */
    private final Map<SensorKey, Long> filling = new HashMap<>();
    /** Per sensor in a downward run of its share: when the engine's first cut under its window was held. */
    private final Map<SensorKey, Long> drainHeld = new HashMap<>();

    LimitShaper(BudgetSettings settings) {
        this.settings = settings;
    }

    /** A round's reading of the sensor's windowed rate: a window measuring something is filling, an empty one not. */
    void measured(SensorKey sensor, double rate, long now) {
        if (rate > 0) {
            filling.putIfAbsent(sensor, now - settings.intervalMs());
        } else {
            filling.remove(sensor);
        }
    }

    /** Forget the sensors Kafka no longer has. */
    void retain(Set<SensorKey> live) {
        filling.keySet().retainAll(live);
        drainHeld.keySet().retainAll(live);
    }

    /**
     * The limit a sensor enforces when the engine answered {@code share} and it enforced {@code was} (NaN when that
     * is not comparable: another budget, or not coordinated): the share, or, for {@code quota.budget.drain.hold.ms}
     * (3 s) from the first cut of a saturated sensor under what its window measures ({@code rate}), that rate (at
     * most {@code was}). The records its clients had queued for it (a producer's queue for a partition's old leader,
     * about a second of the budget) then pass at once, not one request per mute of {@code (rate - share) / share}
     * windows, and the broker is silent, and released, seconds sooner. Once per downward run of its share; the
     * enforced limits sum above B by at most the cut meanwhile.
     */
    double drained(SensorKey sensor, long now, double share, double was, double rate, boolean saturated) {
        if (!(share < was)) {
            drainHeld.remove(sensor);
            return share;
        }
        Long since = drainHeld.get(sensor);
        if (since == null && saturated && rate > share) {
            since = now;
            drainHeld.put(sensor, now);
        }
        if (since != null && saturated && now - since < settings.drainHoldMs()) {
            return Math.min(was, Math.max(share, rate));
        }
        return share;
    }

    /**
     * A share as a limit on a sensor whose window is filling again (new, or its clients back after a window or more
     * of silence): at most the share times the time it has been filling over Kafka's window, from one round's
     * worth. Kafka's windowed rate divides what the window holds by at least its whole span ({@code
     * (quota.window.num - 1) * quota.window.size.seconds}, 10 s), so such a sensor admits ten seconds of its limit at
     * once: a producer whose demand moved to a broker it had left (or never used) delivered that burst on top of the
     * budget at every move (1.23 B in a 30 s window, measured). The ramp only slows a rise: never under what the
     * sensor enforced ({@code was}: a cut under what its window measures mutes its clients, and the allowance grows
     * meanwhile; traced, a cut at a first round muted a new leader 8.7 s and it then sent 9 s of the budget at
     * once), nor under the {@code floor}.
     */
    double ramped(SensorKey sensor, long now, double share, double was, double floor) {
        if (!settings.windowRamp()) {
            return share;
        }
        Long since = filling.get(sensor);
        double ramp = share * rampFraction(since == null ? 0 : now - since);
        return Math.min(share, Math.max(ramp, Math.max(was, floor)));
    }

    /** What part of a share a sensor whose window has been filling for {@code filledMs} enforces. */
    private double rampFraction(long filledMs) {
        double window = settings.rateWindowSeconds() * 1000;
        return Math.min(1.0, Math.max(filledMs, settings.intervalMs()) / window);
    }
}
