package quotaportal.kafka.quota;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.reflect.Field;
import java.net.InetAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;

import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.Quota;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.common.utils.internals.Sanitizer;
import org.apache.kafka.network.Session;
import org.apache.kafka.server.config.ClientQuotaManagerConfig;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaManager;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.apache.kafka.server.quota.QuotaType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Without portal data the plugin answers exactly as Kafka 4.4's default callback: Kafka's own
 * {@link ClientQuotaManager} (built as Kafka's ClientQuotaManagerTest builds one, with no callback plugin, so with
 * its private DefaultQuotaCallback) and the plugin get the same random sequences of quota changes at the 8 levels,
 * as Kafka's KRaft metadata manager hands them over (sanitized user entities, the default entities), and after
 * every change both answer the same metric tags (Kafka's own request path: getOrCreateQuotaSensors) and the same
 * limits (the callback's quotaLimit, null for no quota) for every client of a universe with odd names.
 */
class DefaultPrecedenceEquivalenceTest {
    private static final String[] USERS = {"alice", "bob", "user with space", "b@b.com", "\u00fcser", "<default>", "ANONYMOUS"};
    private static final String[] CLIENTS = {"app", "app-2", "c d", "", "<default>", "q\"uote"};
    private static final double[] VALUES = {1024, 2048, 1_048_576, 3.5, 0, 1e12};

    private final List<ClientQuotaManager> managers = new ArrayList<>();
    private Metrics metrics;

    @BeforeEach
    void setUp() {
        metrics = new Metrics();
    }

    @AfterEach
    void tearDown() {
        for (ClientQuotaManager m : managers) {
            m.shutdown();
        }
        metrics.close();
    }

    private ClientQuotaManager kafka(QuotaType type) {
        ClientQuotaManager m = new ClientQuotaManager(new ClientQuotaManagerConfig(11, 1), metrics, type, Time.SYSTEM,
                "test-");
        managers.add(m);
        return m;
    }

    private static ClientQuotaCallback defaultCallbackOf(ClientQuotaManager manager) throws ReflectiveOperationException {
        Field f = ClientQuotaManager.class.getDeclaredField("quotaCallback");
        f.setAccessible(true);
        return (ClientQuotaCallback) f.get(manager);
    }

    /** One of the 8 levels, as Kafka's entities (null = the level is absent). */
    private record Level(ClientQuotaEntity.ConfigEntity user, ClientQuotaEntity.ConfigEntity client) {
        ClientQuotaManager.KafkaQuotaEntity entity() {
            return new ClientQuotaManager.KafkaQuotaEntity(user, client);
        }
    }

    private static Level randomLevel(Random random) {
        ClientQuotaEntity.ConfigEntity user = new ClientQuotaManager.UserEntity(
                Sanitizer.sanitize(USERS[random.nextInt(USERS.length)]));
        ClientQuotaEntity.ConfigEntity client = new ClientQuotaManager.ClientIdEntity(
                CLIENTS[random.nextInt(CLIENTS.length)]);
        return switch (random.nextInt(8)) {
            case 0 -> new Level(user, client);
            case 1 -> new Level(user, ClientQuotaManager.DEFAULT_USER_CLIENT_ID);
            case 2 -> new Level(user, null);
            case 3 -> new Level(ClientQuotaManager.DEFAULT_USER_ENTITY, client);
            case 4 -> new Level(ClientQuotaManager.DEFAULT_USER_ENTITY, ClientQuotaManager.DEFAULT_USER_CLIENT_ID);
            case 5 -> new Level(ClientQuotaManager.DEFAULT_USER_ENTITY, null);
            case 6 -> new Level(null, client);
            default -> new Level(null, ClientQuotaManager.DEFAULT_USER_CLIENT_ID);
        };
    }

    @Test
    void randomConfigurationsOfTheEightLevelsGiveKafkasTagsAndLimits() throws Exception {
        Random random = new Random(20260428L);
        int compared = 0;
        for (int trial = 0; trial < 300; trial++) {
            QuotaType kafkaType = trial % 3 == 0 ? QuotaType.PRODUCE : trial % 3 == 1 ? QuotaType.FETCH : QuotaType.REQUEST;
            ClientQuotaType type = QuotaType.toClientQuotaType(kafkaType);
            ClientQuotaManager kafka = kafka(kafkaType);
            ClientQuotaCallback kafkaCallback = defaultCallbackOf(kafka);
            BudgetQuotaCallback plugin = new BudgetQuotaCallback();
            plugin.configure(Map.of("node.id", "1"));
            Map<Level, Double> configured = new HashMap<>();
            int steps = 1 + random.nextInt(14);
            for (int step = 0; step < steps; step++) {
                Level level = randomLevel(random);
                if (random.nextInt(4) == 0 && !configured.isEmpty()) {
                    // remove one that is there (or, sometimes, one that is not)
                    Level gone = random.nextBoolean() ? configured.keySet().iterator().next() : level;
                    kafka.updateQuota(Optional.ofNullable(gone.user()), Optional.ofNullable(gone.client()), Optional.empty());
                    plugin.removeQuota(type, gone.entity());
                    configured.remove(gone);
                } else {
                    double value = VALUES[random.nextInt(VALUES.length)];
                    kafka.updateQuota(Optional.ofNullable(level.user()), Optional.ofNullable(level.client()),
                            Optional.of(new Quota(value, true)));
                    plugin.updateQuota(type, level.entity(), value);
                    configured.put(level, value);
                }
                compared += compareAll(kafka, kafkaCallback, plugin, type, "trial " + trial + " step " + step + " "
                        + configured);
            }
            plugin.close();
            kafka.shutdown();
            managers.remove(kafka);
        }
        // every client of the universe after every change: thousands of comparisons
        assertEquals(true, compared > 10_000, "compared " + compared);
    }

    private int compareAll(ClientQuotaManager kafka, ClientQuotaCallback kafkaCallback, BudgetQuotaCallback plugin,
                           ClientQuotaType type, String context) {
        int n = 0;
        for (String user : USERS) {
            KafkaPrincipal principal = new KafkaPrincipal(KafkaPrincipal.USER_TYPE, user);
            Session session = new Session(principal, InetAddress.getLoopbackAddress());
            for (String client : CLIENTS) {
                // Kafka's request path (the default callback is asked through the session's sanitized user)
                Map<String, String> kafkaTags = kafka.getOrCreateQuotaSensors(session, client).metricTags();
                Map<String, String> pluginTags = plugin.quotaMetricTags(type, principal, client);
                String where = context + " user=" + user + " client=" + client;
                assertEquals(List.copyOf(kafkaTags.entrySet()), List.copyOf(pluginTags.entrySet()), "tags, " + where);
                assertEquals(kafkaCallback.quotaMetricTags(type, principal, client), pluginTags, "callback tags, " + where);
                assertEquals(kafkaCallback.quotaLimit(type, kafkaTags), plugin.quotaLimit(type, pluginTags),
                        "limit, " + where);
                assertEquals(kafka.quota(user, client).bound(), bound(plugin.quotaLimit(type, pluginTags)),
                        "quota(), " + where);
                // and any tag shape a sensor can carry
                String sanitized = Sanitizer.sanitize(user);
                for (Map<String, String> tags : List.of(tags(sanitized, client), tags(sanitized, ""), tags("", client),
                        tags("", ""))) {
                    assertEquals(kafkaCallback.quotaLimit(type, tags), plugin.quotaLimit(type, tags),
                            "limit of " + tags + ", " + where);
                }
                n++;
            }
        }
        return n;
    }

    private static double bound(Double limit) {
        return limit == null ? Long.MAX_VALUE : limit;
    }

    private static Map<String, String> tags(String user, String client) {
        Map<String, String> tags = new LinkedHashMap<>();
        tags.put("user", user);
        tags.put("client-id", client);
        return tags;
    }

    @Test
    void withoutARedisUrlTheQuotasNeverNeedAReset() {
        BudgetQuotaCallback plugin = new BudgetQuotaCallback();
        plugin.configure(Map.of("node.id", "1"));
        plugin.updateQuota(ClientQuotaType.PRODUCE, new Level(new ClientQuotaManager.UserEntity("alice"), null).entity(), 5);
        for (ClientQuotaType type : ClientQuotaType.values()) {
            assertEquals(false, plugin.quotaResetRequired(type));
        }
        assertEquals(null, plugin.coordinator());
        plugin.close();
    }
}
