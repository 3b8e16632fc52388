package quotaportal.kafka.quota;

import java.util.EnumMap;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.server.quota.ClientQuotaType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A controller's view of the scope hash: its quota groups' controller mutation values and its exempt principals
 * ({@link GroupTable#CONTROLLER}), read every {@code quota.budget.interval.ms} without taking part in budget rounds.
 * It only reads ({@code HGET #version}, then {@code HKEYS} when the version moved): it never writes
 * {@code qb:{C}:brokers} nor a budget key, so the portal's broker count stays the brokers'. Kafka's controller
 * enforces a controller mutation quota once for the cluster, so a group's value is the limit as it is (never a
 * cluster-wide budget: a {@code controller_mutation {"group":..}} scope field is ignored). The last known groups are
 * kept while Redis is away.
 */
final class ScopeReader implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(BudgetQuotaCallback.class);

    private final BudgetRedis redis;
    private final String key;
    private final EnumMap<ClientQuotaType, AtomicBoolean> resets = new EnumMap<>(ClientQuotaType.class);
    private String version;
    private boolean failing;
    private volatile GroupTable groups = GroupTable.parse(List.of(), GroupTable.CONTROLLER);

    ScopeReader(String cluster, BudgetRedis redis) {
        this.redis = redis;
        this.key = "qb:{" + cluster + "}:scope";
        for (ClientQuotaType type : ClientQuotaType.values()) {
            resets.put(type, new AtomicBoolean());
        }
    }

    /** The groups and exempt principals last read (none until the first successful read). */
    GroupTable groups() {
        return groups;
    }

    /** One read; true when the groups changed what some quota type answers (its reset flag is then set). */
    boolean read() {
        BudgetRedis.Scope scope;
        try {
            scope = redis.scope(key, version);
        } catch (Exception e) {
            if (!failing) {
                LOG.warn("quota groups: reading {} failed, keeping the groups last read: {}", key, e.toString());
            }
            failing = true;
            return false;
        }
        if (failing) {
            LOG.info("quota groups: reading {} again", key);
            failing = false;
        }
        if (scope == null) {
            return false;
        }
        GroupTable after = GroupTable.parse(scope.fields(), GroupTable.CONTROLLER);
        GroupTable before = groups;
        version = scope.version();
        groups = after;
        boolean moved = false;
        for (ClientQuotaType type : before.changed(after)) {
            resets.get(type).set(true);
            moved = true;
        }
        return moved;
    }

    /** True once after a read changed what the type answers, so that Kafka reads its sensors' limits again. */
    boolean quotaResetRequired(ClientQuotaType type) {
        AtomicBoolean flag = resets.get(type);
        return flag.get() && flag.getAndSet(false);
    }

    @Override
    public void close() {
        try {
            redis.close();
        } catch (Exception e) {
            LOG.debug("closing the scope reader's Redis connection", e);
        }
    }
}
