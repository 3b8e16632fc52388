package quotaportal.kafka.quota;

/**
 * One budget's demand on this broker, from the rate Kafka measures for its sensor.
 *
 * <p>Kafka's quota rate is a windowed average: over the last {@code W = (quota.window.num - 1) *
 * quota.window.size.seconds} seconds, so it lags what clients want now. A rising rate means the current demand is
 * above the window's average, a falling one that it is below; the estimate extrapolates the slope over the window:
 *
 * <pre>
 *   demand = max(0, r + (r - r_prev) / dt * W)
 * </pre>
 *
 * (the first sample is taken as it is). Not thread-safe: the background thread owns it.
 */
final class DemandEstimator {
    private final double windowSeconds;
    private double previousRate = Double.NaN;
    private long previousMs;
    private double last;

    DemandEstimator(double windowSeconds) {
        this.windowSeconds = windowSeconds;
    }

    /** The demand now, given the rate {@code rate} measured at {@code nowMs} (units of the quota per second). */
    double update(double rate, long nowMs) {
        if (Double.isNaN(rate) || rate < 0) {
            rate = 0;
        }
        double demand;
        if (Double.isNaN(previousRate) || nowMs <= previousMs) {
            demand = rate;
        } else {
            double dt = (nowMs - previousMs) / 1000.0;
            demand = rate + (rate - previousRate) / dt * windowSeconds;
        }
        previousRate = rate;
        previousMs = nowMs;
        last = Math.max(0, demand);
        return last;
    }

    double last() {
        return last;
    }

    /** The rate the last {@link #update} was given (0 before the first): the round before's, until this one's. */
    double lastRate() {
        return Double.isNaN(previousRate) ? 0 : previousRate;
    }
}
