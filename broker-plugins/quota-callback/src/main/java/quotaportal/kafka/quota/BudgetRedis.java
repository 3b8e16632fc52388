package quotaportal.kafka.quota;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * What the plugin asks of the engine's Redis: a broker runs {@code budget_share.lua} with these KEYS and ARGV
 * (docs/internals/cluster-budgets-protocol.md); a controller only reads the scope hash ({@link #scope}). The
 * production implementation is {@link JedisBudgetRedis}; the state machine's tests give it fakes. Called from the
 * plugin's background thread only.
 */
interface BudgetRedis extends AutoCloseable {

    /** One round; throws on anything but a reply (unreachable, timed out, a script error, a malformed reply). */
    Reply round(List<String> keys, List<String> args) throws Exception;

    /**
     * The scope hash's fields but {@code #version} (sorted), read without writing anything: null when its
     * {@code #version} is {@code knownVersion} (null: none known yet). Throws as {@link #round} does.
     */
    Scope scope(String key, String knownVersion) throws Exception;

    @Override
    default void close() {
    }

    /** A scope hash as read: its {@code #version} ("" when it has none) and its other fields. */
    record Scope(String version, List<String> fields) {
    }

    /**
     * The script's answer {@code {now_ms, scope_version, scope, shares, moved, resync}}: the engine's clock, the
     * scope's version ("" when there is no scope), every scope field when the version differs from the one the
     * broker sent (else an empty list), one share per budget in the report as a decimal string ("" = not
     * cluster-wide, or left), the shares other brokers' rounds moved of budgets not in the report (budget id ->
     * share), and whether the engine asks for a whole report next.
     */
    record Reply(long nowMs, String scopeVersion, List<String> scope, List<String> shares, Map<String, String> moved,
                 boolean resync) {

        Reply(long nowMs, String scopeVersion, List<String> scope, List<String> shares) {
            this(nowMs, scopeVersion, scope, shares, Map.of(), false);
        }

        /** From what a Redis client returns for the script's table (nested lists, strings or numbers, nulls). */
        static Reply parse(Object raw) {
            if (!(raw instanceof List<?> parts) || parts.size() < 6) {
                throw new IllegalStateException("budget_share.lua answered " + raw
                        + ", not {now, version, scope, shares, moved, resync}");
            }
            long now = Long.parseLong(text(parts.get(0)));
            String version = text(parts.get(1));
            List<String> pairs = strings(parts.get(4));
            Map<String, String> moved = new LinkedHashMap<>();
            for (int i = 0; i + 1 < pairs.size(); i += 2) {
                moved.put(pairs.get(i), pairs.get(i + 1));
            }
            return new Reply(now, version, strings(parts.get(2)), strings(parts.get(3)), moved,
                    "1".equals(text(parts.get(5))));
        }

        private static List<String> strings(Object raw) {
            List<String> out = new ArrayList<>();
            if (raw == null) {
                return out;
            }
            if (!(raw instanceof List<?> items)) {
                throw new IllegalStateException("budget_share.lua answered " + raw + " where a list belongs");
            }
            for (Object item : items) {
                out.add(text(item));
            }
            return out;
        }

        private static String text(Object raw) {
            if (raw == null || Boolean.FALSE.equals(raw)) {
                return "";
            }
            if (raw instanceof byte[] bytes) {
                return new String(bytes, java.nio.charset.StandardCharsets.UTF_8);
            }
            return raw.toString();
        }
    }
}
