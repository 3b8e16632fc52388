package quotaportal.kafka.quota;

import java.util.ArrayList;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;

import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.metrics.Monitorable;
import org.apache.kafka.common.metrics.PluginMetrics;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.utils.internals.Sanitizer;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import quotaportal.kafka.quota.BudgetCoordinator.SensorBudget;
import quotaportal.kafka.quota.QuotaTable.EntityKey;

/**
 * The quota portal's client quota callback for Apache Kafka 4.4 ({@code client.quota.callback.class}): Kafka's own
 * quotas, and cluster-wide budgets shared out by measured demand.
 *
 * <p>Without {@code quota.budget.redis.url} (or without portal data: no scope in the engine) it answers exactly as
 * Kafka's default callback does: the 8-level precedence of user, client-id and their defaults, metric tags
 * {@code user} (sanitized) and {@code client-id} with "" for a level left out, no limit where no quota applies
 * ({@link QuotaTable}). With it, a quota value the portal marked cluster-wide (the scope, in the engine's Redis) is a
 * budget B for the sum over all brokers: each broker enforces its share of B, which a background thread takes from
 * the engine every {@code quota.budget.interval.ms} ({@link BudgetCoordinator}); when Redis is away the shares are
 * kept for the lease, then B / live brokers. Kafka still measures and throttles with its own sensors. The scope
 * also carries the portal's quota groups and exempt principals ({@link GroupTable}): they apply from the first
 * successful round on (until then a member gets Kafka's own answer) and the last known ones are kept while Redis
 * is away.
 *
 * <p>The methods Kafka calls on its request path ({@link #quotaMetricTags}, {@link #quotaLimit},
 * {@link #quotaResetRequired}) read memory only: concurrent maps and volatile snapshots, no lock held across I/O.
 *
 * <p>A combined broker and controller creates two instances (one per role); only the broker's coordinates (its role
 * comes with {@link #withPluginMetrics}). The controller's (and a controller-only node's) takes no part in budget
 * rounds: it reads the scope's groups and exempt principals every interval ({@link ScopeReader}) for the controller
 * mutation quota, which Kafka's controller applies.
 */
public class BudgetQuotaCallback implements ClientQuotaCallback, Monitorable {
    private static final Logger LOG = LoggerFactory.getLogger(BudgetQuotaCallback.class);
    private static final int MAX_CACHED_USERS = 10_000;
    /** A tracked sensor whose MBean is missing this many rounds in a row is forgotten (Kafka expired it). */
    private static final int MISSING_ROUNDS = 3;

    private final EnumMap<ClientQuotaType, QuotaTable> tables = new EnumMap<>(ClientQuotaType.class);
    private final ConcurrentHashMap<String, String> sanitizedUsers = new ConcurrentHashMap<>();
    /** The sensors the hot path handed tags out for (only while coordinating). */
    private final ConcurrentHashMap<SensorKey, Tracked> handedOut = new ConcurrentHashMap<>();
    /** Each group member's requests (only while coordinating). */
    private final GroupMembers groupMembers = new GroupMembers();
    private final CountDownLatch roleKnown = new CountDownLatch(1);
    private final Object wake = new Object();

    private BudgetSettings settings;
    private volatile BudgetCoordinator coordinator;
    private volatile ScopeReader reader;
    private JedisBudgetRedis controllerRedis;
    private volatile boolean tracking;
    private volatile boolean closed;
    private volatile String role;
    private JmxRates rates;
    private BudgetMBeans mbeans;
    private Thread worker;

    public BudgetQuotaCallback() {
        for (ClientQuotaType type : ClientQuotaType.values()) {
            tables.put(type, new QuotaTable());
        }
    }

    // -- configuration -----------------------------------------------------------------------------------------------

    @Override
    public void configure(Map<String, ?> configs) {
        settings = BudgetSettings.from(configs);
        if (!settings.coordinated()) {
            LOG.info("BudgetQuotaCallback started without {}: Kafka's default client quotas, no cluster-wide budgets",
                    BudgetSettings.REDIS_URL);
            return;
        }
        Object roles = configs.get("process.roles");
        boolean controllerOnly = roles != null && !roles.toString().isBlank() && !roles.toString().contains("broker");
        JedisBudgetRedis redis;
        try {
            redis = new JedisBudgetRedis(settings.redisUrl(), settings.redisTimeoutMs());
        } catch (IllegalArgumentException e) {
            throw new ConfigException(BudgetSettings.REDIS_URL, JedisBudgetRedis.redacted(settings.redisUrl()),
                    e.getMessage());
        }
        if (controllerOnly) {
            controllerRedis = redis; // the worker only reads the scope's groups (the role is the controller's)
        } else {
            rates = new JmxRates();
            coordinator = new BudgetCoordinator(settings, redis, System::currentTimeMillis, null, this::liveSensors,
                    rates);
        }
        worker = new Thread(this::run, "quota-budget-callback-" + settings.brokerId());
        worker.setDaemon(true);
        worker.start();
    }

    /** Kafka hands its plugins their metrics with the role they serve: a combined node has a broker and a controller. */
    @Override
    public void withPluginMetrics(PluginMetrics metrics) {
        try {
            role = metrics.metricName("quota-budget-role", "", new LinkedHashMap<>()).tags().get("role");
        } catch (RuntimeException e) {
            role = null;
        }
        roleKnown.countDown();
        if (coordinator == null && !"controller".equals(role)) {
            synchronized (this) {
                if (mbeans == null && !closed) {
                    mbeans = new BudgetMBeans();
                    mbeans.registerCallback(null); // state "off"
                }
            }
        }
    }

    private void run() {
        try {
            roleKnown.await(2, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            return;
        }
        BudgetCoordinator c = coordinator;
        if (closed) {
            return;
        }
        if (c == null || "controller".equals(role)) {
            // the controller's quota managers: no budgets, only the groups' controller mutation values
            coordinator = null;
            readScope(c == null ? controllerRedis : c.redis());
            return;
        }
        synchronized (this) {
            if (closed) {
                return;
            }
            mbeans = new BudgetMBeans();
            mbeans.registerCallback(c);
            mbeans.groupMembers(groupMembers);
            c.listener(mbeans);
        }
        tracking = true;
        LOG.info("BudgetQuotaCallback started: cluster-wide budgets of cluster {} through {} (broker {}, a round every "
                        + "{} ms, lease {} ms, floor fraction {}, headroom {}, Redis timeout {} ms); state fallback until "
                        + "the first round", settings.cluster(), JedisBudgetRedis.redacted(settings.redisUrl()),
                settings.brokerId(), settings.intervalMs(), settings.leaseMs(), settings.floorFraction(),
                settings.headroom(), settings.redisTimeoutMs());
        while (!closed) {
            try {
                if (c.runRound() && !closed) {
                    c.runRound(); // the scope changed: report the budgets it made cluster-wide now
                }
            } catch (RuntimeException e) {
                LOG.warn("quota budgets: a round failed unexpectedly", e);
            }
            synchronized (wake) {
                if (closed) {
                    break;
                }
                try {
                    wake.wait(settings.intervalMs());
                } catch (InterruptedException e) {
                    break;
                }
            }
        }
    }

    /** The controller's loop: read the scope's groups every interval, never a budget round (no broker's report). */
    private void readScope(BudgetRedis redis) {
        ScopeReader r = new ScopeReader(settings.cluster(), redis);
        reader = r;
        LOG.info("BudgetQuotaCallback on the controller: the quota groups of cluster {} through {} for controller "
                        + "mutations, read every {} ms; no budget rounds", settings.cluster(),
                JedisBudgetRedis.redacted(settings.redisUrl()), settings.intervalMs());
        while (!closed) {
            r.read();
            synchronized (wake) {
                if (closed) {
                    break;
                }
                try {
                    wake.wait(settings.intervalMs());
                } catch (InterruptedException e) {
                    break;
                }
            }
        }
        r.close();
    }

    /** The groups the request path answers with: the coordinator's (a broker), the reader's (a controller), or null. */
    private GroupTable groups() {
        BudgetCoordinator c = coordinator;
        if (c != null) {
            return c.view().groups;
        }
        ScopeReader r = reader;
        return r == null ? null : r.groups();
    }

    /** The tracked sensors Kafka still has, with the value each resolves to; forgets those Kafka expired. */
    private List<SensorBudget> liveSensors() {
        List<SensorBudget> out = new ArrayList<>();
        for (Map.Entry<SensorKey, Tracked> e : handedOut.entrySet()) {
            SensorKey sensor = e.getKey();
            Tracked t = e.getValue();
            if (!rates.exists(sensor)) {
                if (++t.missing >= MISSING_ROUNDS) {
                    handedOut.remove(sensor, t);
                    rates.forget(sensor);
                }
                continue;
            }
            t.missing = 0;
            QuotaTable.Resolved r = resolve(sensor.type(), sensor.user(), sensor.clientId());
            if (r != null) {
                out.add(new SensorBudget(sensor, r.entity(), r.bound(), t.lastRequestMs));
            }
        }
        return out;
    }

    // -- Kafka's calls -------------------------------------------------------------------------------------------------

    /**
     * The value and entity a sensor's tags resolve to: none for an exempt principal's, a group's value for its
     * {@code group@<name>} tag (while the group is in the scope), else Kafka's (its {@link QuotaTable}); null for no
     * quota.
     */
    private QuotaTable.Resolved resolve(ClientQuotaType type, String user, String clientId) {
        GroupTable groups = groups();
        if (groups != null && groups.exemptTag(user)) {
            return null; // an exempt principal's own sensor
        }
        if (groups != null && GroupTable.isGroupTag(user)) {
            GroupTable.Group group = groups.byTag(user);
            Double value = group == null || !groups.answers(type) ? null : group.quota(type);
            return value == null ? null : new QuotaTable.Resolved(group.entity(), value);
        }
        return tables.get(type).resolve(user, clientId);
    }

    @Override
    public Map<String, String> quotaMetricTags(ClientQuotaType quotaType, KafkaPrincipal principal, String clientId) {
        String user = sanitize(principal.getName());
        GroupTable groups = groups();
        Map<String, String> tags = groups == null || groups.isEmpty() ? null
                : groups.metricTags(quotaType, principal.getName(), user, clientId, tables.get(quotaType));
        if (tags == null) {
            tags = tables.get(quotaType).metricTags(user, clientId);
        }
        if (tracking && SensorKey.budgetable(quotaType)) {
            SensorKey sensor = new SensorKey(quotaType, tags.get(QuotaTable.USER_TAG), tags.get(QuotaTable.CLIENT_ID_TAG));
            Tracked t = handedOut.get(sensor);
            if (t == null) {
                handedOut.putIfAbsent(sensor, new Tracked());
                t = handedOut.get(sensor);
            }
            if (t != null) {
                t.lastRequestMs = System.currentTimeMillis(); // Kafka asks for the tags on every request
            }
            if (GroupTable.isGroupTag(sensor.user())) {
                groupMembers.count(sensor.user(), quotaType, user, clientId);
            }
        }
        return tags;
    }

    @Override
    public Double quotaLimit(ClientQuotaType quotaType, Map<String, String> metricTags) {
        String user = metricTags.get(QuotaTable.USER_TAG);
        String clientId = metricTags.get(QuotaTable.CLIENT_ID_TAG);
        QuotaTable.Resolved resolved = resolve(quotaType, user, clientId);
        if (resolved == null) {
            return null;
        }
        BudgetCoordinator c = coordinator;
        if (c == null) {
            return resolved.bound();
        }
        return c.limit(quotaType, user, clientId, resolved);
    }

    @Override
    public void updateQuota(ClientQuotaType quotaType, ClientQuotaEntity quotaEntity, double newValue) {
        EntityKey entity = EntityKey.of(quotaEntity);
        LOG.info("Changing {} quota for {} to {}", quotaType, entity, newValue);
        tables.get(quotaType).update(entity, newValue);
    }

    @Override
    public void removeQuota(ClientQuotaType quotaType, ClientQuotaEntity quotaEntity) {
        EntityKey entity = EntityKey.of(quotaEntity);
        LOG.info("Removing {} quota for {}", quotaType, entity);
        tables.get(quotaType).remove(entity);
    }

    @Override
    public boolean quotaResetRequired(ClientQuotaType quotaType) {
        BudgetCoordinator c = coordinator;
        if (c != null) {
            return c.quotaResetRequired(quotaType);
        }
        ScopeReader r = reader;
        return r != null && r.quotaResetRequired(quotaType);
    }

    @Override
    public boolean updateClusterMetadata(Cluster cluster) {
        BudgetCoordinator c = coordinator;
        if (c != null) {
            // one Node per broker and listener: count the brokers
            c.liveBrokers((int) cluster.nodes().stream().mapToInt(Node::id).distinct().count());
        }
        return false; // limits move with the rounds, which say so through quotaResetRequired
    }

    @Override
    public void close() {
        closed = true;
        synchronized (wake) {
            wake.notifyAll();
        }
        Thread t = worker;
        if (t != null) {
            try {
                t.join(Math.max(2_000, 2L * (settings == null ? 500 : settings.redisTimeoutMs())));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        BudgetCoordinator c = coordinator;
        if (c != null) {
            c.close();
        }
        synchronized (this) {
            if (mbeans != null) {
                mbeans.close();
                mbeans = null;
            }
        }
        tracking = false;
        handedOut.clear();
    }

    // -- for the tests -------------------------------------------------------------------------------------------------

    BudgetCoordinator coordinator() {
        return coordinator;
    }

    /** Coordinates as a broker does after its role is known, but with no background thread: the test runs rounds. */
    BudgetCoordinator coordinate(BudgetSettings settings, BudgetRedis redis, LongSupplier clockMs, JmxRates rates) {
        this.settings = settings;
        this.rates = rates;
        coordinator = new BudgetCoordinator(settings, redis, clockMs, null, this::liveSensors, rates);
        tracking = true;
        return coordinator;
    }

    /** Reads the scope as a controller does, with no background thread: the test calls {@link ScopeReader#read}. */
    ScopeReader readAsController(BudgetSettings settings, BudgetRedis redis) {
        this.settings = settings;
        reader = new ScopeReader(settings.cluster(), redis);
        return reader;
    }

    GroupMembers groupMembers() {
        return groupMembers;
    }

    QuotaTable table(ClientQuotaType type) {
        return tables.get(type);
    }

    private String sanitize(String user) {
        String s = sanitizedUsers.get(user);
        if (s == null) {
            s = Sanitizer.sanitize(user);
            if (sanitizedUsers.size() >= MAX_CACHED_USERS) {
                sanitizedUsers.clear();
            }
            sanitizedUsers.put(user, s);
        }
        return s;
    }

    private static final class Tracked {
        int missing; // the background thread's
        volatile long lastRequestMs = -1; // the request path's
    }
}
