package quotaportal.kafka.quota;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import redis.clients.jedis.Jedis;
import redis.clients.jedis.params.ScanParams;
import redis.clients.jedis.resps.ScanResult;

import quotaportal.kafka.quota.BudgetCoordinator.SensorBudget;
import quotaportal.kafka.quota.QuotaTable.EntityKey;

/**
 * The engine's real script (the resource the jar carries: engine/lua/budget_share.lua) on a real Redis
 * ({@code QUOTAS_REDIS_URL}, as the test command sets it; without it this test fails, it never skips): three
 * simulated brokers, each a {@link BudgetCoordinator} over its own {@link JedisBudgetRedis}, share a budget
 * {@code produce {"user":"alice"}} of B. Each simulated second every broker runs its round; a broker's measured rate
 * is what its clients want, capped by the share it enforces (Kafka throttles the rest). The shares held never sum
 * above B once every broker has joined, and follow the demand when it moves from broker 1 to broker 3.
 */
class RealRedisScriptTest {
    private static final double B = 3_000_000;
    private static final String FIELD = "produce {\"user\":\"alice\"}";
    private static final SensorKey ALICE = new SensorKey(ClientQuotaType.PRODUCE, "alice", "");

    private String url;
    private String cluster;
    private final List<JedisBudgetRedis> connections = new ArrayList<>();

    @BeforeEach
    void setUp() {
        url = System.getenv("QUOTAS_REDIS_URL");
        if (url == null || url.isBlank()) {
            fail("QUOTAS_REDIS_URL is not set: this test runs the real budget_share.lua on a real Redis. Run it through "
                    + "the test command (bash scripts/run_tests.sh tests/broker_plugins), or start one with "
                    + "`python -m devtools.redis_server start` and export QUOTAS_REDIS_URL=redis://127.0.0.1:<port>/0");
        }
        cluster = "junit-" + ProcessHandle.current().pid() + "-" + System.nanoTime();
    }

    @AfterEach
    void tearDown() {
        for (JedisBudgetRedis c : connections) {
            c.close();
        }
        if (url != null && cluster != null) {
            try (Jedis jedis = jedis()) {
                String cursor = ScanParams.SCAN_POINTER_START;
                do {
                    ScanResult<String> page = jedis.scan(cursor, new ScanParams().match("qb:{" + cluster + "}:*"));
                    for (String key : page.getResult()) {
                        jedis.del(key);
                    }
                    cursor = page.getCursor();
                } while (!cursor.equals(ScanParams.SCAN_POINTER_START));
            }
        }
    }

    private Jedis jedis() {
        URI uri = URI.create(url);
        Jedis jedis = new Jedis(uri, 2_000);
        return jedis;
    }

    private BudgetCoordinator broker(int id, AtomicLong clock, Map<Integer, Double> limits, Map<Integer, Double> want) {
        BudgetSettings settings = BudgetSettings.from(Map.of("node.id", Integer.toString(id), "quota.budget.redis.url",
                url, "quota.budget.cluster", cluster, "quota.budget.window.ramp", "false")); // shares as answered
        JedisBudgetRedis redis = new JedisBudgetRedis(url, 2_000);
        connections.add(redis);
        BudgetCoordinator c = new BudgetCoordinator(settings, redis, clock::get, clock::get,
                () -> List.of(new SensorBudget(ALICE, EntityKey.user("alice"), B)),
                // what its clients send, capped by the share it enforces (Kafka throttles the rest)
                s -> Math.min(want.getOrDefault(id, 0.0), limits.getOrDefault(id, B / 3)));
        c.liveBrokers(3);
        return c;
    }

    private static double limit(BudgetCoordinator c) {
        return c.limit(ALICE, new QuotaTable.Resolved(EntityKey.user("alice"), B));
    }

    private Map<Integer, Double> heldInRedis() {
        return heldInRedis(ALICE);
    }

    /** Each broker's held share of a sensor's budget, as the engine's reader (engine/lua/budget_state.lua) gives it. */
    private Map<Integer, Double> heldInRedis(SensorKey sensor) {
        Map<Integer, Double> held = new HashMap<>();
        try (Jedis jedis = jedis()) {
            String reader = Files.readString(Path.of("../../engine/lua/budget_state.lua"));
            Object raw = jedis.eval(reader, List.of("qb:{" + cluster + "}:b:" + sensor.budgetId()), List.of());
            List<?> flat = (List<?>) raw;
            for (int i = 0; i < flat.size(); i += 5) {
                String share = String.valueOf(flat.get(i + 4));
                if (!share.isEmpty()) {
                    held.put(Integer.parseInt(String.valueOf(flat.get(i))), Double.parseDouble(share));
                }
            }
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
        return held;
    }

    @Test
    void theScriptInTheJarIsTheEnginesFile() throws Exception {
        String engine = java.nio.file.Files.readString(java.nio.file.Path.of(System.getProperty("user.dir"))
                .resolve("../../engine/lua/budget_share.lua").normalize());
        assertEquals(engine, JedisBudgetRedis.loadScript());
    }

    @Test
    void threeBrokersShareABudgetWithinBAndFollowADemandShift() {
        try (Jedis jedis = jedis()) {
            jedis.hset("qb:{" + cluster + "}:scope", Map.of("#version", "1", FIELD, "cluster"));
        }
        AtomicLong clock = new AtomicLong(1_000_000_000L);
        Map<Integer, Double> limits = new HashMap<>();
        Map<Integer, Double> want = new HashMap<>(Map.of(1, 2_500_000.0, 2, 200_000.0, 3, 200_000.0));
        List<BudgetCoordinator> brokers = List.of(broker(1, clock, limits, want), broker(2, clock, limits, want),
                broker(3, clock, limits, want));
        long shiftAt = -1;
        long followed = -1;
        StringBuilder trace = new StringBuilder();
        for (int second = 0; second < 30; second++) {
            if (second == 15) {
                want.putAll(Map.of(1, 200_000.0, 2, 200_000.0, 3, 2_500_000.0));
                shiftAt = second;
            }
            for (int i = 0; i < brokers.size(); i++) {
                BudgetCoordinator c = brokers.get(i);
                clock.addAndGet(100); // the brokers' rounds spread over the second
                if (c.runRound()) {
                    c.runRound();
                }
                assertEquals(BudgetCoordinator.State.COORDINATED, c.state(), "broker " + (i + 1) + ": " + c.lastError());
                limits.put(i + 1, limit(c));
                Map<Integer, Double> held = heldInRedis();
                double sum = held.values().stream().mapToDouble(Double::doubleValue).sum();
                double enforced = limits.values().stream().mapToDouble(Double::doubleValue).sum();
                if (second >= 1) {
                    // every broker has joined: what they hold, and what they enforce, is at most B
                    assertTrue(sum <= B * (1 + 1e-12), "held " + held + " sums to " + sum + " > B at " + second + " s");
                    assertTrue(enforced <= B * (1 + 1e-12), "enforced " + limits + " > B at " + second + " s");
                }
                for (double share : held.values()) {
                    assertTrue(share > 0, "a share is never zero: " + held);
                }
            }
            clock.addAndGet(700);
            trace.append(second).append(" s: ").append(limits).append('\n');
            if (second == 14) {
                assertTrue(limits.get(1) >= 0.8 * B, "broker 1 has most of B before the shift:\n" + trace);
                assertTrue(limits.get(3) < 0.2 * B, "broker 3 little:\n" + trace);
            }
            if (shiftAt >= 0 && followed < 0 && limits.get(3) >= 0.8 * B && limits.get(1) < 0.2 * B) {
                followed = second - shiftAt;
            }
        }
        assertTrue(followed >= 0 && followed <= 5, "the shares followed the shift in " + followed + " s:\n" + trace);
        // all three brokers are in the budget's hash, each with its share, demand and round
        Map<Integer, Double> held = heldInRedis();
        assertEquals(3, held.size(), held.toString());
    }

    @Test
    void aRoundCarriesOnlyWhatMovedAndTakesTheSharesOthersMoved() {
        try (Jedis jedis = jedis()) {
            jedis.hset("qb:{" + cluster + "}:scope", Map.of("#version", "1", FIELD, "cluster"));
        }
        AtomicLong clock = new AtomicLong(1_000_000_000L);
        Map<Integer, Double> limits = new HashMap<>();
        Map<Integer, Double> want = new HashMap<>(Map.of(1, 400_000.0, 2, 400_000.0, 3, 0.0));
        List<BudgetCoordinator> brokers = List.of(broker(1, clock, limits, want), broker(2, clock, limits, want),
                broker(3, clock, limits, want));
        Runnable second = () -> {
            for (int i = 0; i < brokers.size(); i++) {
                BudgetCoordinator c = brokers.get(i);
                clock.addAndGet(100);
                if (c.runRound()) {
                    c.runRound();
                }
                assertEquals(BudgetCoordinator.State.COORDINATED, c.state(), c.lastError());
                limits.put(i + 1, limit(c));
            }
            clock.addAndGet(700);
        };
        for (int s = 0; s < 10; s++) {
            second.run();
        }
        // demand steady: the rounds are heartbeats, and the spare is spread evenly over the three
        for (BudgetCoordinator c : brokers) {
            assertEquals(0, c.lastReported(), "nothing moved, nothing reported");
        }
        double before = limits.get(1);
        assertTrue(before > 1_000_000, limits.toString());
        // broker 3's clients arrive: its round reports it, and the others' next rounds take the shares it moved
        // though their own reports did not move (the water-fill gives them their need: 400,000 with 20 % headroom)
        want.put(3, 600_000.0);
        second.run();
        assertEquals(1, brokers.get(2).lastReported());
        second.run();
        for (int i = 0; i < 2; i++) {
            assertEquals(0, brokers.get(i).lastReported(), "broker " + (i + 1) + " reported nothing");
            assertEquals(480_000.0, limits.get(i + 1), 1e-6, "broker " + (i + 1) + " took the share moved: " + limits);
        }
        assertEquals(limits.get(1), heldInRedis().get(1), 1e-6);
    }

    @Test
    void productionRoundsUseRedissClock() throws Exception {
        try (Jedis jedis = jedis()) {
            jedis.hset("qb:{" + cluster + "}:scope", Map.of("#version", "7", FIELD, "cluster"));
        }
        JedisBudgetRedis redis = new JedisBudgetRedis(url, 2_000);
        connections.add(redis);
        BudgetRedis.Reply reply = redis.round(List.of("qb:{" + cluster + "}:scope", "qb:{" + cluster + "}:brokers"),
                List.of("4", "10000", "0.05", "0.2", "", ""));
        assertTrue(Math.abs(reply.nowMs() - System.currentTimeMillis()) < 60_000, "Redis's clock: " + reply.nowMs());
        assertEquals("7", reply.scopeVersion());
        assertEquals(List.of(FIELD), reply.scope());
        assertEquals(List.of(), reply.shares());
        // the version it holds: no scope in the answer
        reply = redis.round(List.of("qb:{" + cluster + "}:scope", "qb:{" + cluster + "}:brokers"),
                List.of("4", "10000", "0.05", "0.2", "", "7"));
        assertEquals(List.of(), reply.scope());
    }

    @Test
    void aGroupsClusterWideBudgetIsSharedThroughTheScript() throws Exception {
        String gold = GroupTableTest.group("gold", 1, false, "\"svc-*\"", null, "\"producer_byte_rate\":3000.0", "");
        try (Jedis jedis = jedis()) {
            jedis.hset("qb:{" + cluster + "}:scope", Map.of("#version", "1", gold, "cluster",
                    "produce {\"group\":\"gold\"}", "cluster", "exempt root", "cluster"));
        }
        javax.management.MBeanServer server = javax.management.MBeanServerFactory.newMBeanServer();
        BudgetQuotaCallback plugin = new BudgetQuotaCallback();
        JedisBudgetRedis redis = new JedisBudgetRedis(url, 2_000);
        connections.add(redis);
        AtomicLong clock = new AtomicLong(1_000_000_000L);
        BudgetCoordinator c = plugin.coordinate(BudgetSettings.from(Map.of("node.id", "5", "quota.budget.redis.url",
                url, "quota.budget.cluster", cluster, "quota.budget.window.ramp", "false")), redis, clock::get,
                new JmxRates(server));
        c.liveBrokers(3);
        c.runRound();
        var principal = new org.apache.kafka.common.security.auth.KafkaPrincipal("User", "svc-web");
        Map<String, String> tags = plugin.quotaMetricTags(ClientQuotaType.PRODUCE, principal, "app");
        assertEquals(Map.of("user", "group@gold", "client-id", ""), tags);
        assertEquals(1000.0, plugin.quotaLimit(ClientQuotaType.PRODUCE, tags), "B / live brokers before a share");
        SensorKey sensor = new SensorKey(ClientQuotaType.PRODUCE, "group@gold", "");
        server.registerMBean(new javax.management.StandardMBean(new GroupQuotaCallbackTest.SensorMBean() {
        }, GroupQuotaCallbackTest.SensorMBean.class), JmxRates.sensorName(sensor)); // Kafka made the sensor
        clock.addAndGet(1_000);
        c.runRound();
        Double held = heldInRedis(sensor).get(5);
        assertEquals("produce {\"client-id\":\"\",\"user\":\"group@gold\"}", sensor.budgetId());
        assertTrue(held != null, "the script holds broker 5's share of the group's budget");
        assertEquals(held, plugin.quotaLimit(ClientQuotaType.PRODUCE, tags));
        assertEquals(BudgetCoordinator.State.COORDINATED, c.state(), c.lastError());
        assertEquals(null, plugin.quotaLimit(ClientQuotaType.PRODUCE, plugin.quotaMetricTags(ClientQuotaType.PRODUCE,
                new org.apache.kafka.common.security.auth.KafkaPrincipal("User", "root"), "app")), "exempt");
        plugin.close();
    }

    @Test
    void theControllerReadsTheScopeWithoutJoiningTheBrokers() throws Exception {
        String gold = GroupTableTest.group("gold", 1, true, "", null, "\"controller_mutation_rate\":4.0", "");
        String scope = "qb:{" + cluster + "}:scope";
        try (Jedis jedis = jedis()) {
            jedis.hset(scope, Map.of("#version", "1", gold, "cluster", "exempt root", "cluster"));
        }
        JedisBudgetRedis redis = new JedisBudgetRedis(url, 2_000);
        connections.add(redis);
        assertEquals(new BudgetRedis.Scope("1", List.of("exempt root", gold)), redis.scope(scope, null));
        assertEquals(null, redis.scope(scope, "1"), "the version it holds: nothing more read");
        BudgetQuotaCallback plugin = new BudgetQuotaCallback();
        ScopeReader reader = plugin.readAsController(BudgetSettings.from(Map.of("node.id", "3000",
                "quota.budget.redis.url", url, "quota.budget.cluster", cluster)), redis);
        assertTrue(reader.read());
        var principal = new org.apache.kafka.common.security.auth.KafkaPrincipal("User", "svc-web");
        Map<String, String> tags = plugin.quotaMetricTags(ClientQuotaType.CONTROLLER_MUTATION, principal, "app");
        assertEquals(Map.of("user", "group@gold", "client-id", ""), tags);
        assertEquals(4.0, plugin.quotaLimit(ClientQuotaType.CONTROLLER_MUTATION, tags));
        try (Jedis jedis = jedis()) {
            assertEquals(List.of(scope), List.copyOf(jedis.keys("qb:{" + cluster + "}:*")),
                    "no brokers hash, no budget key: the portal counts brokers from qb:{C}:brokers");
        }
        plugin.close();
    }
}
