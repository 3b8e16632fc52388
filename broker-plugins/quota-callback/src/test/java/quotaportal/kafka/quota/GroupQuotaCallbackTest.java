package quotaportal.kafka.quota;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.SocketTimeoutException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

import javax.management.MBeanServer;
import javax.management.MBeanServerFactory;
import javax.management.ObjectName;
import javax.management.StandardMBean;

import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.quota.ClientQuotaManager;
import org.apache.kafka.server.quota.ClientQuotaManager.KafkaQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import quotaportal.kafka.quota.LeaseStateMachineTest.FakeRedis;

/**
 * Quota groups and exempt principals through the callback Kafka calls: the precedence of exempt, Kafka's values
 * that name a client, groups in order and Kafka's defaults; a cluster-wide group budget's share; the resets a group
 * change asks for. The scope comes from a fake of the Redis call (as in {@link LeaseStateMachineTest}), Kafka's
 * sensors are MBeans in a private MBeanServer.
 */
class GroupQuotaCallbackTest {
    private static final ClientQuotaType P = ClientQuotaType.PRODUCE;
    private static final ClientQuotaType F = ClientQuotaType.FETCH;
    private static final ClientQuotaType R = ClientQuotaType.REQUEST;
    private static final String GOLD = GroupTableTest.group("gold", 1, false, "\"svc-*\"", null,
            "\"consumer_byte_rate\":2000.0,\"producer_byte_rate\":1000.0", "\"alice\"");
    private static final String SILVER = GroupTableTest.group("silver", 2, true, "", null,
            "\"producer_byte_rate\":500.0,\"request_percentage\":50.0", "");

    /** What Kafka's sensors need of an MBean here: to be there. */
    public interface SensorMBean {
    }

    private final AtomicLong clock = new AtomicLong(0);
    private final MBeanServer server = MBeanServerFactory.newMBeanServer();
    private FakeRedis redis;
    private BudgetQuotaCallback plugin;
    private BudgetCoordinator coordinator;

    @BeforeEach
    void setUp() {
        redis = new FakeRedis();
        redis.version = "1";
        redis.scope.addAll(List.of(GOLD, SILVER, "exempt root"));
        plugin = new BudgetQuotaCallback();
        plugin.updateQuota(P, new KafkaQuotaEntity(new ClientQuotaManager.UserEntity("alice"), null), 7000);
        plugin.updateQuota(P, new KafkaQuotaEntity(ClientQuotaManager.DEFAULT_USER_ENTITY, null), 100);
        BudgetSettings settings = BudgetSettings.from(Map.of("node.id", "2", "quota.budget.redis.url",
                "redis://127.0.0.1:1/0", "quota.budget.cluster", "c1", "quota.budget.lease.ms", "10000",
                "quota.budget.window.ramp", "false")); // shares as answered: the ramp is LeaseStateMachineTest's
        coordinator = plugin.coordinate(settings, redis, clock::get, new JmxRates(server));
        coordinator.liveBrokers(4);
    }

    @AfterEach
    void tearDown() {
        plugin.close();
    }

    private void round() {
        if (coordinator.runRound()) {
            coordinator.runRound();
        }
        clock.addAndGet(1_000);
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

    /** The limit Kafka would set on the sensor of the client's tags. */
    private Double limit(ClientQuotaType type, String principal, String clientId) {
        return plugin.quotaLimit(type, tags(type, principal, clientId));
    }

    private void drainResets() {
        for (ClientQuotaType type : ClientQuotaType.values()) {
            plugin.quotaResetRequired(type);
        }
    }

    @Test
    void untilTheFirstRoundAMemberGetsKafkasOwnAnswer() {
        assertEquals(tags("svc-web", ""), tags(P, "svc-web", "c"));
        assertEquals(100.0, limit(P, "svc-web", "c"));
        assertEquals(tags("root", ""), tags(P, "root", "c"), "nor is anyone exempt yet");
    }

    @Test
    void exemptThenKafkasNamingValuesThenGroupsInOrderThenKafkasDefaults() {
        round();
        // a. an exempt principal: a sensor of its own and no quota of any type, even with a value of its own
        plugin.updateQuota(P, new KafkaQuotaEntity(new ClientQuotaManager.UserEntity("root"), null), 10);
        for (ClientQuotaType type : ClientQuotaType.values()) {
            assertEquals(tags("root", "c"), tags(type, "root", "c"), type.toString());
            assertNull(limit(type, "root", "c"), type.toString());
        }
        // b. a member with its own user value keeps Kafka's answer for that type ...
        assertEquals(tags("alice", ""), tags(P, "alice", "c"));
        assertEquals(7000.0, limit(P, "alice", "c"));
        // ... and gets its group's where it has none of its own
        assertEquals(tags("group@gold", ""), tags(F, "alice", "c"));
        assertEquals(2000.0, limit(F, "alice", "c"));
        // c. a default-only value loses to the group; the first member group in order with a value of the type
        assertEquals(tags("group@gold", ""), tags(P, "svc-web", "c"));
        assertEquals(1000.0, limit(P, "svc-web", "c"));
        assertEquals(tags("group@silver", ""), tags(P, "web", "c"), "not in gold: silver (any) answers");
        assertEquals(500.0, limit(P, "web", "c"));
        assertEquals(tags("group@silver", ""), tags(R, "svc-web", "c"), "gold has no request value: silver's");
        assertEquals(50.0, limit(R, "svc-web", "c"));
        // a client-id's own value that Kafka's precedence passes over for a default (level 6 before 7): the group
        plugin.updateQuota(P, new KafkaQuotaEntity(null, new ClientQuotaManager.ClientIdEntity("shadow")), 9000);
        assertEquals(tags("group@gold", ""), tags(P, "svc-web", "shadow"));
        assertEquals(1000.0, limit(P, "svc-web", "shadow"));
        // d. no group has a value of the type: Kafka's own answer (here: no fetch quota at all)
        assertEquals(tags("", "c"), tags(F, "web", "c"));
        assertNull(limit(F, "web", "c"));
        assertEquals(tags("", "c"), tags(ClientQuotaType.CONTROLLER_MUTATION, "svc-web", "c"), "never a group");
        // a group tag no longer in the scope has no quota
        assertNull(plugin.quotaLimit(P, tags("group@gone", "")));
    }

    @Test
    void aClusterWideGroupBudgetGetsItsShare() throws Exception {
        redis.scope.add("produce {\"group\":\"gold\"}");
        round();
        Map<String, String> sensor = tags(P, "svc-web", "c");
        assertEquals(tags("group@gold", ""), sensor);
        assertEquals(250.0, plugin.quotaLimit(P, sensor), "B / live brokers until it has a share");
        // Kafka creates the sensor's metrics; the next round reports the group's budget and takes its share
        server.registerMBean(new StandardMBean(new SensorMBean() {
        }, SensorMBean.class), JmxRates.sensorName(new SensorKey(P, "group@gold", "")));
        redis.shares.put("produce {\"client-id\":\"\",\"user\":\"group@gold\"}", "420.5");
        round();
        List<String> keys = redis.keys.get(redis.keys.size() - 1);
        assertEquals("qb:{c1}:b:produce {\"client-id\":\"\",\"user\":\"group@gold\"}", keys.get(2));
        assertEquals(List.of("produce {\"group\":\"gold\"}", "1000"), redis.lastArgs().subList(6, 8));
        assertEquals(420.5, plugin.quotaLimit(P, sensor));
        assertEquals(7000.0, limit(P, "alice", "c"), "alice's own value is Kafka's, per broker");
        assertEquals(500.0, limit(P, "web", "c"), "a per-broker group stays per broker");

        // Redis away: the groups and the share are kept for the lease
        redis.failure = new SocketTimeoutException("Read timed out");
        round();
        assertEquals(tags("group@gold", ""), tags(P, "svc-web", "c"));
        assertEquals(420.5, plugin.quotaLimit(P, sensor));
    }

    @Test
    void aGroupChangeAsksKafkaToReadTheLimitsOfTheTypesItMoves() {
        round();
        round();
        drainResets();
        redis.version = "2";
        redis.scope.set(0, GOLD.replace("2000.0", "3000.0"));
        round();
        assertTrue(plugin.quotaResetRequired(F));
        assertFalse(plugin.quotaResetRequired(P), "gold's produce value and members are as they were");
        assertEquals(3000.0, limit(F, "svc-web", "c"));

        drainResets();
        redis.version = "3";
        redis.scope.remove("exempt root");
        round();
        for (ClientQuotaType type : ClientQuotaType.values()) {
            assertTrue(plugin.quotaResetRequired(type), type.toString());
        }
        assertEquals(tags("", "c"), tags(F, "root", "c"), "no group has a fetch value for root: Kafka's answer");
        assertEquals(tags("group@silver", ""), tags(P, "root", "c"), "no longer exempt: a member of silver");
    }

    @Test
    void eachGroupMemberHasItsRequestCountsInJmx() throws Exception {
        BudgetMBeans mbeans = new BudgetMBeans(server);
        mbeans.groupMembers(plugin.groupMembers());
        coordinator.listener(mbeans);
        round();
        tags(P, "svc-web", "c1");
        tags(P, "svc-web", "c1");
        tags(F, "svc-web", "c1");
        tags(R, "svc-web", "c1"); // silver's: gold has no request value
        tags(P, "svc-db", "");
        tags(P, "alice", "c"); // alice's own produce value: not the group's sensor
        round();
        ObjectName web = new ObjectName("kafka.server:type=quota-budget-group,group=gold,user=svc-web,client-id=c1");
        assertEquals(2L, server.getAttribute(web, "produce-requests"));
        assertEquals(1L, server.getAttribute(web, "fetch-requests"));
        assertEquals(0L, server.getAttribute(web, "request-requests"));
        assertEquals(1L, server.getAttribute(new ObjectName("kafka.server:type=quota-budget-group,group=gold,"
                + "user=svc-db"), "produce-requests"), "an empty client id is left out of the name, as Kafka does");
        ObjectName silverWeb = new ObjectName("kafka.server:type=quota-budget-group,group=silver,user=svc-web,"
                + "client-id=c1");
        assertEquals(1L, server.getAttribute(silverWeb, "request-requests"));
        ObjectName gold = new ObjectName("kafka.server:type=quota-budget-group,group=gold");
        assertEquals(2, server.getAttribute(gold, "members"));
        assertEquals(0L, server.getAttribute(gold, "untracked-requests"));

        // at most MAX_MEMBERS members per group are tracked; the others' requests are counted together
        for (int i = 0; i <= GroupMembers.MAX_MEMBERS; i++) {
            tags(P, "svc-" + i, "c");
        }
        round();
        assertEquals(GroupMembers.MAX_MEMBERS, server.getAttribute(gold, "members"));
        assertEquals(3L, server.getAttribute(gold, "untracked-requests"));
        assertEquals(GroupMembers.MAX_MEMBERS + 1, server.queryNames(
                new ObjectName("kafka.server:type=quota-budget-group,group=gold,*"), null).size());

        // a group gone takes its MBeans along; closing takes the rest
        redis.version = "2";
        redis.scope.remove(SILVER);
        round();
        assertFalse(server.isRegistered(silverWeb));
        assertFalse(server.isRegistered(new ObjectName("kafka.server:type=quota-budget-group,group=silver")));
        assertTrue(server.isRegistered(web));
        mbeans.close();
        assertEquals(Set.of(), server.queryNames(new ObjectName("kafka.server:type=quota-budget-group,*"), null));
    }
}
