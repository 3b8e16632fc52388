package quotaportal.kafka.quota;

import java.util.Map;

import org.apache.kafka.common.config.ConfigException;

/**
 * The plugin's broker settings (server.properties), read once in configure():
 *
 * <pre>
 *   quota.budget.redis.url         the engine's Redis (redis://[user:password@]host:port[/db], rediss:// for TLS);
 *                                  absent or empty: no coordination, the plugin is exactly Kafka's default callback
 *   quota.budget.cluster           the portal's name of this cluster (its key space qb:{cluster}:...); required
 *                                  with a URL
 *   quota.budget.interval.ms       1000   a round every so often
 *   quota.budget.lease.ms          10000  shares kept this long without a successful round, then budget / live brokers
 *   quota.budget.floor.fraction    0.05   the least share: budget * fraction / live brokers
 *   quota.budget.headroom          0.2    a broker's need is its demand * (1 + headroom)
 *   quota.budget.redis.timeout.ms  500    connect and read timeout of a round
 *   quota.budget.drain.hold.ms     3000   how long a saturated sensor cut under its window keeps enforcing the
 *                                         window (LimitShaper#drained); 0: cut at once
 *   quota.budget.window.ramp       true   a sensor whose window is filling again enforces its share over the time it
 *                                         has been filling, not Kafka's full window (LimitShaper#ramped)
 * </pre>
 *
 * and Kafka's own {@code quota.window.num} (11) and {@code quota.window.size.seconds} (1), whose windowed rates the
 * demand estimate corrects, and {@code node.id} (or {@code broker.id}).
 */
record BudgetSettings(
        String redisUrl,
        String cluster,
        int brokerId,
        long intervalMs,
        long leaseMs,
        double floorFraction,
        double headroom,
        int redisTimeoutMs,
        long drainHoldMs,
        boolean windowRamp,
        int quotaWindowNum,
        int quotaWindowSizeSeconds) {

    static final String REDIS_URL = "quota.budget.redis.url";
    static final String CLUSTER = "quota.budget.cluster";
    static final String INTERVAL_MS = "quota.budget.interval.ms";
    static final String LEASE_MS = "quota.budget.lease.ms";
    static final String FLOOR_FRACTION = "quota.budget.floor.fraction";
    static final String HEADROOM = "quota.budget.headroom";
    static final String REDIS_TIMEOUT_MS = "quota.budget.redis.timeout.ms";
    static final String DRAIN_HOLD_MS = "quota.budget.drain.hold.ms";
    static final String WINDOW_RAMP = "quota.budget.window.ramp";
    static final String QUOTA_WINDOW_NUM = "quota.window.num";
    static final String QUOTA_WINDOW_SIZE_SECONDS = "quota.window.size.seconds";

    static BudgetSettings from(Map<String, ?> configs) {
        String url = string(configs, REDIS_URL, "");
        String cluster = string(configs, CLUSTER, "");
        if (!url.isEmpty() && cluster.isEmpty()) {
            throw new ConfigException(CLUSTER, null, "the portal's name of this cluster is required with " + REDIS_URL);
        }
        String id = string(configs, "node.id", "");
        if (id.isEmpty()) {
            id = string(configs, "broker.id", "-1");
        }
        BudgetSettings s = new BudgetSettings(
                url,
                cluster,
                brokerId(id),
                (long) number(configs, INTERVAL_MS, "1000"),
                (long) number(configs, LEASE_MS, "10000"),
                number(configs, FLOOR_FRACTION, "0.05"),
                number(configs, HEADROOM, "0.2"),
                (int) number(configs, REDIS_TIMEOUT_MS, "500"),
                (long) number(configs, DRAIN_HOLD_MS, "3000"),
                bool(configs, WINDOW_RAMP, "true"),
                (int) number(configs, QUOTA_WINDOW_NUM, "11"),
                (int) number(configs, QUOTA_WINDOW_SIZE_SECONDS, "1"));
        s.check();
        return s;
    }

    boolean coordinated() {
        return !redisUrl.isEmpty();
    }

    /** W of the demand estimate: the span Kafka's windowed rate averages over, in seconds. */
    double rateWindowSeconds() {
        return (double) (quotaWindowNum - 1) * quotaWindowSizeSeconds;
    }

    /**
     * The span Kafka divides a quota violation by when it throttles (seconds): its quota window whole, {@code
     * quota.window.num * quota.window.size.seconds}, once a sensor is older than that. A request that brings the
     * rate to R over a limit L is throttled for {@code (R - L) / L} of it.
     */
    double throttleWindowSeconds() {
        return (double) quotaWindowNum * quotaWindowSizeSeconds;
    }

    private void check() {
        if (intervalMs < 10) {
            throw new ConfigException(INTERVAL_MS, intervalMs, "at least 10 ms");
        }
        if (leaseMs < intervalMs) {
            throw new ConfigException(LEASE_MS, leaseMs, "at least " + INTERVAL_MS);
        }
        if (!(floorFraction > 0 && floorFraction <= 1)) {
            throw new ConfigException(FLOOR_FRACTION, floorFraction, "in (0, 1]: a share is never zero");
        }
        if (!(headroom >= 0)) {
            throw new ConfigException(HEADROOM, headroom, "at least 0");
        }
        if (redisTimeoutMs < 1) {
            throw new ConfigException(REDIS_TIMEOUT_MS, redisTimeoutMs, "at least 1 ms");
        }
        if (drainHoldMs < 0) {
            throw new ConfigException(DRAIN_HOLD_MS, drainHoldMs, "at least 0 (0: a cut share is enforced at once)");
        }
        if (quotaWindowNum < 2 || quotaWindowSizeSeconds < 1) {
            throw new ConfigException(QUOTA_WINDOW_NUM, quotaWindowNum, "Kafka's quota windows: at least 2 of 1 s");
        }
    }

    private static String string(Map<String, ?> configs, String key, String fallback) {
        Object value = configs.get(key);
        if (value == null) {
            return fallback;
        }
        String s = value.toString().trim();
        return s.isEmpty() ? fallback : s;
    }

    private static boolean bool(Map<String, ?> configs, String key, String fallback) {
        String text = string(configs, key, fallback).toLowerCase(java.util.Locale.ROOT);
        if (!text.equals("true") && !text.equals("false")) {
            throw new ConfigException(key, text, "true or false");
        }
        return text.equals("true");
    }

    private static int brokerId(String text) {
        try {
            return Integer.parseInt(text);
        } catch (NumberFormatException e) {
            throw new ConfigException("node.id", text, "not a broker id");
        }
    }

    /** A number setting; {@code key}'s value when set, else {@code fallback} (a number as text). */
    private static double number(Map<String, ?> configs, String key, String fallback) {
        String text = string(configs, key, fallback);
        try {
            return Double.parseDouble(text);
        } catch (NumberFormatException e) {
            throw new ConfigException(key, text, "not a number");
        }
    }
}
