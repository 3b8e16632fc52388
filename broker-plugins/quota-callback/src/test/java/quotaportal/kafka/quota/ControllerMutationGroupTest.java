package quotaportal.kafka.quota;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.SocketTimeoutException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.quota.ClientQuotaManager;
import org.apache.kafka.server.quota.ClientQuotaManager.KafkaQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import quotaportal.kafka.quota.LeaseStateMachineTest.FakeRedis;

/**
 * The controller's instance and a group's controller_mutation_rate: it reads the scope hash (a fake of Redis) with no
 * budget round, and answers exempt, then Kafka's values that name the client, then the first member group holding
 * the value (per controller, never cluster-wide), then Kafka's defaults; a broker's instance never gives a group's
 * controller mutation tags.
 */
class ControllerMutationGroupTest {
    private static final ClientQuotaType M = ClientQuotaType.CONTROLLER_MUTATION;
    private static final String GOLD = GroupTableTest.group("gold", 1, false, "\"svc-*\"", null,
            "\"controller_mutation_rate\":5.0,\"producer_byte_rate\":1000.0", "\"alice\"");
    private static final String SILVER = GroupTableTest.group("silver", 2, true, "", null,
            "\"controller_mutation_rate\":2.5", "");

    private FakeRedis redis;
    private BudgetQuotaCallback plugin;
    private ScopeReader reader;

    @BeforeEach
    void setUp() {
        redis = new FakeRedis();
        redis.version = "1";
        redis.scope.addAll(List.of(GOLD, SILVER, "exempt root", "controller_mutation {\"group\":\"gold\"}"));
        plugin = new BudgetQuotaCallback();
        plugin.updateQuota(M, new KafkaQuotaEntity(new ClientQuotaManager.UserEntity("alice"), null), 9);
        plugin.updateQuota(M, new KafkaQuotaEntity(ClientQuotaManager.DEFAULT_USER_ENTITY, null), 1);
        BudgetSettings settings = BudgetSettings.from(Map.of("node.id", "3000", "quota.budget.redis.url",
                "redis://127.0.0.1:1/0", "quota.budget.cluster", "c1"));
        reader = plugin.readAsController(settings, redis);
    }

    @AfterEach
    void tearDown() {
        plugin.close();
    }

    private Map<String, String> tags(ClientQuotaType type, String principal, String clientId) {
        return plugin.quotaMetricTags(type, new KafkaPrincipal(KafkaPrincipal.USER_TYPE, principal), clientId);
    }

    private static Map<String, String> tags(String user, String clientId) {
        Map<String, String> t = new LinkedHashMap<>();
        t.put("user", user);
        t.put("client-id", clientId);
        return t;
    }

    private Double limit(ClientQuotaType type, String principal, String clientId) {
        return plugin.quotaLimit(type, tags(type, principal, clientId));
    }

    @Test
    void theControllerReadsTheScopeOnlyAndAppliesTheGroupsControllerMutationValues() {
        assertEquals(tags("svc-web", ""), tags(M, "svc-web", "c"), "before the first read: Kafka's answer");
        assertEquals(1.0, limit(M, "svc-web", "c"));
        assertTrue(reader.read());
        assertEquals(List.of(List.of("qb:{c1}:scope")), redis.keys, "a read of the scope hash, never a round");
        assertTrue(redis.args.isEmpty(), "no budget round: the controller is no broker");
        // exempt: a sensor of its own, no quota
        assertEquals(tags("root", "c"), tags(M, "root", "c"));
        assertNull(limit(M, "root", "c"));
        // Kafka's value that names the client wins
        assertEquals(tags("alice", ""), tags(M, "alice", "c"));
        assertEquals(9.0, limit(M, "alice", "c"));
        // the first member group holding the value: its own value, per controller (the cluster-wide field ignored)
        assertEquals(tags("group@gold", ""), tags(M, "svc-web", "c"));
        assertEquals(5.0, limit(M, "svc-web", "c"));
        assertEquals(tags("group@silver", ""), tags(M, "web", "c"));
        assertEquals(2.5, limit(M, "web", "c"));
        // the controller's instance has no groups of the broker's types
        assertEquals(tags("", "c"), tags(ClientQuotaType.PRODUCE, "svc-web", "c"), "Kafka's: no produce quota");
        assertNull(plugin.quotaLimit(ClientQuotaType.PRODUCE, tags("group@gold", "")));

        // the same version: nothing read again; Redis away: the groups last read stay
        assertFalse(reader.read());
        redis.failure = new SocketTimeoutException("Read timed out");
        assertFalse(reader.read());
        assertEquals(5.0, limit(M, "svc-web", "c"));
    }

    @Test
    void aGroupChangeAsksTheControllerToReadItsLimitsAgain() {
        reader.read();
        for (ClientQuotaType type : ClientQuotaType.values()) {
            plugin.quotaResetRequired(type);
        }
        redis.version = "2";
        redis.scope.set(0, GOLD.replace("\"producer_byte_rate\":1000.0", "\"producer_byte_rate\":7.0"));
        assertFalse(reader.read(), "gold's controller mutation value is as it was");
        redis.version = "3";
        redis.scope.set(0, GOLD.replace("5.0", "6.0"));
        assertTrue(reader.read());
        assertTrue(plugin.quotaResetRequired(M));
        assertFalse(plugin.quotaResetRequired(M), "once");
        assertFalse(plugin.quotaResetRequired(ClientQuotaType.PRODUCE));
        assertEquals(6.0, limit(M, "svc-web", "c"));
        redis.version = "4";
        redis.scope.clear();
        assertTrue(reader.read());
        assertEquals(tags("svc-web", ""), tags(M, "svc-web", "c"), "no groups left: Kafka's answer");
    }

    @Test
    void aBrokersGroupsNeverAnswerForControllerMutations() {
        GroupTable broker = GroupTable.parse(List.of(GOLD, SILVER));
        assertFalse(broker.answers(M));
        assertNull(broker.metricTags(M, "svc-web", "svc-web", "c", new QuotaTable()));
        assertEquals(tags("group@gold", ""), broker.metricTags(ClientQuotaType.PRODUCE, "svc-web", "svc-web", "c",
                new QuotaTable()));
        GroupTable controller = GroupTable.parse(List.of(GOLD, SILVER), GroupTable.CONTROLLER);
        assertNull(controller.metricTags(ClientQuotaType.PRODUCE, "svc-web", "svc-web", "c", new QuotaTable()));
        assertEquals(5.0, controller.groupOf(M, "svc-web", "c").quota(M));
    }
}
