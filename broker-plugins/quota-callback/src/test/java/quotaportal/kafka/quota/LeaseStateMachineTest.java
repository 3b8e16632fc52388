package quotaportal.kafka.quota;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.SocketTimeoutException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import quotaportal.kafka.quota.BudgetCoordinator.SensorBudget;
import quotaportal.kafka.quota.BudgetCoordinator.State;
import quotaportal.kafka.quota.QuotaTable.EntityKey;

/**
 * The lease and fallback state machine, with a clock the test moves and a fake of the Redis call (the
 * {@link BudgetRedis} interface: it answers as the protocol says budget_share.lua answers, with shares the test
 * picks, or fails as an unreachable or slow Redis does).
 */
class LeaseStateMachineTest {
    private static final String ALICE_FIELD = "produce {\"user\":\"alice\"}";
    private static final SensorKey ALICE = new SensorKey(ClientQuotaType.PRODUCE, "alice", "");
    private static final SensorKey BOB = new SensorKey(ClientQuotaType.FETCH, "bob", "");

    /** The script as far as a broker can tell: the scope with its version, and the shares it hands out. */
    static final class FakeRedis implements BudgetRedis {
        String version = "";
        List<String> scope = new ArrayList<>();
        final Map<String, String> shares = new HashMap<>(); // budget id -> share ('' or absent: not cluster-wide)
        private final Map<String, String> answered = new HashMap<>(); // budget id -> the share the broker was told
        // budget id -> the four values of the broker's report the script holds (a round sends only what moved)
        private final Map<String, List<String>> held = new java.util.LinkedHashMap<>();
        Exception failure;
        final List<List<String>> keys = new ArrayList<>();
        final List<List<String>> args = new ArrayList<>();

        @Override
        public Reply round(List<String> k, List<String> a) throws Exception {
            keys.add(k);
            args.add(a);
            if (failure != null) {
                throw failure;
            }
            List<String> answer = new ArrayList<>();
            Set<String> reported = new HashSet<>();
            for (int i = 2; i < k.size(); i++) {
                String field = a.get(7 + (i - 2) * 4);
                String id = k.get(i).substring(k.get(i).indexOf(":b:") + 3);
                reported.add(id);
                List<String> values = a.subList(7 + (i - 2) * 4, 11 + (i - 2) * 4);
                if ("-".equals(values.get(3))) {
                    held.remove(id);
                } else {
                    held.put(id, List.copyOf(values));
                }
                String share = scope.contains(field) && !"-".equals(a.get(10 + (i - 2) * 4))
                        ? shares.getOrDefault(id, "") : "";
                answer.add(share);
                answered.put(id, share);
            }
            // as the script does: the shares of budgets not in the report that moved since the broker was told
            Map<String, String> moved = new HashMap<>();
            for (Map.Entry<String, String> e : answered.entrySet()) {
                String now = shares.getOrDefault(e.getKey(), "");
                if (!reported.contains(e.getKey()) && !e.getValue().isEmpty() && !now.isEmpty()
                        && !now.equals(e.getValue())) {
                    moved.put(e.getKey(), now);
                    e.setValue(now);
                }
            }
            return new Reply(1_000, version, version.equals(a.get(5)) ? List.of() : List.copyOf(scope), answer, moved,
                    false);
        }

        @Override
        public Scope scope(String key, String knownVersion) throws Exception {
            keys.add(List.of(key));
            if (failure != null) {
                throw failure;
            }
            return version.equals(knownVersion) ? null : new Scope(version, List.copyOf(scope));
        }

        /**
         * The broker's report as the script holds it after the last round: that round's ARGV[1..6], then the four
         * values of each budget as last reported (a round carries only the budgets whose report moved).
         */
        List<String> lastArgs() {
            List<String> a = new ArrayList<>(args.get(args.size() - 1).subList(0, 6));
            for (List<String> values : held.values()) {
                a.addAll(values);
            }
            return a;
        }
    }

    private final AtomicLong clock = new AtomicLong(0);
    private final QuotaTable produce = new QuotaTable();
    private final QuotaTable fetch = new QuotaTable();
    private final Map<SensorKey, Double> measured = new HashMap<>();
    private final Map<SensorKey, Double> throttles = new HashMap<>();
    private final Map<SensorKey, Long> lastRequests = new HashMap<>();
    private FakeRedis redis;
    private BudgetCoordinator coordinator;

    @BeforeEach
    void setUp() {
        produce.update(EntityKey.user("alice"), 3_000);
        fetch.update(EntityKey.user("bob"), 500);
        redis = new FakeRedis();
        redis.version = "1";
        redis.scope.add(ALICE_FIELD);
        start("3000", "false"); // the shares as answered, held or not: the ramp has tests of its own
    }

    /** A coordinator of broker 2 with {@code quota.budget.drain.hold.ms} and {@code quota.budget.window.ramp}. */
    private void start(String drainHoldMs, String ramp) {
        BudgetSettings settings = BudgetSettings.from(Map.of("node.id", "2", "quota.budget.redis.url",
                "redis://127.0.0.1:1/0", "quota.budget.cluster", "c1", "quota.budget.lease.ms", "10000",
                "quota.budget.drain.hold.ms", drainHoldMs, "quota.budget.window.ramp", ramp));
        coordinator = new BudgetCoordinator(settings, redis, clock::get, null, this::sensors,
                new BudgetCoordinator.RateSource() {
                    @Override
                    public double rate(SensorKey sensor) {
                        return measured.getOrDefault(sensor, 0.0);
                    }

                    @Override
                    public double throttleMs(SensorKey sensor) {
                        return throttles.getOrDefault(sensor, 0.0);
                    }
                });
        coordinator.liveBrokers(3);
    }

    private List<SensorBudget> sensors() {
        List<SensorBudget> out = new ArrayList<>();
        for (SensorKey s : List.of(ALICE, BOB)) {
            QuotaTable table = s.type() == ClientQuotaType.PRODUCE ? produce : fetch;
            QuotaTable.Resolved r = table.resolve(s.user(), s.clientId());
            if (r != null) {
                out.add(new SensorBudget(s, r.entity(), r.bound(), lastRequests.getOrDefault(s, -1L)));
            }
        }
        return out;
    }

    private double limit(SensorKey s) {
        QuotaTable table = s.type() == ClientQuotaType.PRODUCE ? produce : fetch;
        return coordinator.limit(s, table.resolve(s.user(), s.clientId()));
    }

    /** A round every second, as the background thread runs them (again at once when the scope changed). */
    private void round() {
        if (coordinator.runRound()) {
            coordinator.runRound();
        }
        clock.addAndGet(1_000);
    }

    @Test
    void coordinatesKeepsSharesForTheLeaseFallsBackAndRejoins() {
        // before any round: the scope is unknown, Kafka's meaning (B per broker), and the state is the fallback
        assertEquals(State.FALLBACK, coordinator.state());
        assertEquals(3_000.0, limit(ALICE));
        redis.shares.put(ALICE.budgetId(), "1800.5");

        round();
        // the first round learned the scope and reported alice's budget in a second one, with the version it holds
        assertEquals(2, redis.args.size());
        assertEquals(List.of("qb:{c1}:scope", "qb:{c1}:brokers"), redis.keys.get(0));
        assertEquals("", redis.args.get(0).get(5));
        assertEquals(List.of("qb:{c1}:scope", "qb:{c1}:brokers", "qb:{c1}:b:produce {\"client-id\":\"\",\"user\":\"alice\"}"),
                redis.keys.get(1));
        assertEquals(List.of("2", "10000", "0.05", "0.2", "", "1", "0", ALICE_FIELD, "3000", "0", "0"),
                redis.args.get(1));
        assertEquals(State.COORDINATED, coordinator.state());
        assertEquals(1_800.5, limit(ALICE));
        assertEquals(500.0, limit(BOB), "a per-broker value stays Kafka's");
        assertTrue(coordinator.quotaResetRequired(ClientQuotaType.PRODUCE));
        assertFalse(coordinator.quotaResetRequired(ClientQuotaType.PRODUCE), "once per move");

        // Redis away (unreachable, or slower than its timeout): the shares are kept for the lease
        redis.failure = new SocketTimeoutException("Read timed out");
        for (int i = 0; i < 9; i++) {
            round();
            assertEquals(State.COORDINATED, coordinator.state(), "within the lease, round " + i);
            assertEquals(1_800.5, limit(ALICE));
            assertFalse(coordinator.quotaResetRequired(ClientQuotaType.PRODUCE));
        }
        assertEquals(9, coordinator.failedRounds());
        // the lease (10 s since the last good round) is over: B / live brokers
        round();
        round();
        assertEquals(State.FALLBACK, coordinator.state());
        assertEquals(1_000.0, limit(ALICE), "B / 3 live brokers");
        assertTrue(coordinator.quotaResetRequired(ClientQuotaType.PRODUCE));
        assertEquals(500.0, limit(BOB));
        // fewer live brokers in the metadata: a bigger part each; never unlimited, never zero
        coordinator.liveBrokers(2);
        round();
        assertEquals(1_500.0, limit(ALICE));
        coordinator.liveBrokers(0);
        round();
        assertEquals(3_000.0, limit(ALICE), "at least one live broker");
        coordinator.liveBrokers(3);

        // Redis answers again: the first good round rejoins
        redis.failure = null;
        redis.shares.put(ALICE.budgetId(), "2000");
        round();
        assertEquals(State.COORDINATED, coordinator.state());
        assertEquals(2_000.0, limit(ALICE));
        assertTrue(coordinator.quotaResetRequired(ClientQuotaType.PRODUCE));
        assertEquals(3, coordinator.rounds(), "three good rounds");
    }

    @Test
    void aRestartedBrokerStartsFromTheFallback() {
        round();
        redis.failure = new java.net.ConnectException("Connection refused");
        // a new coordinator (the broker restarted) while Redis is away: it holds no share, so nothing of a share
        BudgetSettings settings = coordinator.settings();
        BudgetCoordinator restarted = new BudgetCoordinator(settings, redis, clock::get, null, this::sensors, s -> 0.0);
        restarted.liveBrokers(3);
        assertEquals(State.FALLBACK, restarted.state());
        restarted.runRound();
        assertEquals(State.FALLBACK, restarted.state());
        assertEquals(1, restarted.failedRounds());
        // Redis back: its first successful round learns the scope, a new budget starts at B / live brokers ...
        redis.failure = null;
        redis.shares.clear();
        assertTrue(restarted.runRound());
        assertEquals(State.COORDINATED, restarted.state());
        assertEquals(1_000.0, restarted.limit(ALICE, produce.resolve("alice", "")));
        // ... and takes its share from the next one
        redis.shares.put(ALICE.budgetId(), "750");
        restarted.runRound();
        assertEquals(750.0, restarted.limit(ALICE, produce.resolve("alice", "")));
    }

    @Test
    void aSaturatedSensorCutUnderItsWindowKeepsEnforcingItForAFewSecondsOncePerRun() {
        clock.set(100_000);
        redis.shares.put(ALICE.budgetId(), "1000");
        measured.put(ALICE, 960.0);
        round();
        round();
        assertEquals(1_000.0, limit(ALICE));
        // the demand's new broker joined: the engine cuts the share to 600 while Kafka's window measures 980; the
        // records still queued here would be muted (980 - 600) / 600 windows each against the cut
        measured.put(ALICE, 980.0);
        redis.shares.put(ALICE.budgetId(), "600");
        round();
        assertEquals(980.0, limit(ALICE), "held at what the window measures");
        assertTrue(coordinator.quotaResetRequired(ClientQuotaType.PRODUCE));
        measured.put(ALICE, 1_020.0);
        round();
        assertEquals(980.0, limit(ALICE), "never above what it enforced");
        measured.put(ALICE, 700.0);
        round();
        assertEquals(700.0, limit(ALICE), "following the window down");
        round();
        assertEquals(600.0, limit(ALICE), "for quota.budget.drain.hold.ms (3 s), then the share");
        // the same downward run: a further cut is not held again
        redis.shares.put(ALICE.budgetId(), "500");
        round();
        assertEquals(500.0, limit(ALICE));
        // once the share stopped falling, a later cut under the window is held again
        round();
        redis.shares.put(ALICE.budgetId(), "300");
        round();
        assertEquals(500.0, limit(ALICE));
    }

    @Test
    void aRefillingSensorsLimitRisesNoFasterThanItsWindowFillsAndIsNeverLoweredByThat() {
        start("3000", "true");
        clock.set(100_000);
        redis.shares.put(ALICE.budgetId(), "3000");
        round(); // nothing measured yet: what it enforced before (B / 3 live brokers), not the whole share
        assertEquals(1_000.0, limit(ALICE));
        // its clients send: the window fills from the round before the first that saw it; Kafka's window divides by
        // at least its 10 s span, so a share of 3000 now would admit 30 000 at once
        measured.put(ALICE, 900.0);
        round();
        assertEquals(1_000.0, limit(ALICE), "1 s of 10 at 3000 is 300: it keeps what it enforced, never lower");
        round();
        round();
        assertEquals(1_000.0, limit(ALICE), "3 s of 10");
        round();
        assertEquals(1_200.0, limit(ALICE), "4 s of 10 at 3000");
        for (int i = 0; i < 6; i++) {
            round();
        }
        assertEquals(3_000.0, limit(ALICE), "a whole window filled: the share");
        // its clients stop: the window empties, and the ramp does not lower the limit
        measured.put(ALICE, 0.0);
        round();
        assertEquals(3_000.0, limit(ALICE), "never lowered by the ramp");
        redis.shares.put(ALICE.budgetId(), "150"); // released: its clients left
        round();
        assertEquals(150.0, limit(ALICE), "a cut of the share is the share");
        redis.shares.put(ALICE.budgetId(), "3000"); // back, and the share back with them
        measured.put(ALICE, 100.0);
        round();
        assertEquals(300.0, limit(ALICE), "from what it enforced, as its window fills again: 1 s of 10 at 3000");
        // and never under the floor, budget x 0.05 / 3 live brokers = 50
        measured.put(ALICE, 0.0);
        redis.shares.put(ALICE.budgetId(), "20");
        round();
        assertEquals(20.0, limit(ALICE));
        redis.shares.put(ALICE.budgetId(), "400");
        round();
        assertEquals(50.0, limit(ALICE), "idle: 1 s of 10 at 400 is 40, under the floor");
    }

    @Test
    void aSensorUnderItsShareIsCutAtOnce() {
        redis.shares.put(ALICE.budgetId(), "1000");
        measured.put(ALICE, 500.0);
        round();
        round();
        redis.shares.put(ALICE.budgetId(), "400");
        round();
        assertEquals(400.0, limit(ALICE), "not saturated: nothing of its clients' waits on the cut");
    }

    @Test
    void aSaturatedSensorStaysSoUntilItsDemandHasBeenGoneForThreeRounds() {
        redis.shares.put(ALICE.budgetId(), "1000");
        round();
        measured.put(ALICE, 960.0); // 96 % of the share it enforces: saturated
        round();
        List<String> args = redis.lastArgs();
        assertEquals("1", args.get(9));
        // the rate rose from 0 to 960 in a second: the estimate corrects Kafka's 10 s window
        assertEquals(960 + 960 * 10.0, Double.parseDouble(args.get(8)), 1e-6);
        // a client held at its limit is muted now and then and measures under it: still saturated
        measured.put(ALICE, 849.0);
        round();
        assertEquals("1", redis.lastArgs().get(9));
        measured.put(ALICE, 700.0); // 700 - 1490 < 0: low once
        round();
        measured.put(ALICE, 690.0); // 690 - 100 = 590: not under half the share, the count starts again
        round();
        assertEquals("1", redis.lastArgs().get(9));
        // the clients left: three rounds of demand under half the share end it, though the rate is still there
        for (double rate : new double[] {600, 500}) {
            measured.put(ALICE, rate);
            round();
            assertEquals("1", redis.lastArgs().get(9));
        }
        measured.put(ALICE, 400.0);
        round();
        assertEquals("0", redis.lastArgs().get(9));
        // and saturated again only from 95 %
        measured.put(ALICE, 900.0);
        round();
        assertEquals("0", redis.lastArgs().get(9));
        measured.put(ALICE, 950.0);
        round();
        assertEquals("1", redis.lastArgs().get(9));
    }

    @Test
    void aThrottledSensorIsSaturatedUntilItsSilenceOutlastsItsThrottles() {
        clock.set(100_000); // request times are real clock readings, never negative
        redis.shares.put(ALICE.budgetId(), "1000");
        measured.put(ALICE, 960.0);
        round();
        round();
        // Kafka throttles its clients (mean 3 s): they are muted, the rate falls and the estimate with it ...
        throttles.put(ALICE, 3_000.0);
        lastRequests.put(ALICE, clock.get());
        for (double rate : new double[] {800, 600, 400, 200}) {
            measured.put(ALICE, rate);
            round();
            List<String> args = redis.lastArgs();
            assertEquals("1", args.get(9), "a muted client still wants more");
            assertEquals(rate, Double.parseDouble(args.get(8)), 1e-6, "it wants at least what it measures");
        }
        // ... silent for less than twice its throttles: still muted, whatever the window says
        lastRequests.put(ALICE, clock.get() - 5_000);
        measured.put(ALICE, 150.0);
        round();
        assertEquals("1", redis.lastArgs().get(9));
        // silent longer than twice its throttles, but its window still above the limit: Kafka may mute it yet
        lastRequests.put(ALICE, clock.get() - 7_000);
        measured.put(ALICE, 1_100.0);
        round();
        assertEquals("1", redis.lastArgs().get(9));
        // and once the window fell under half the limit: its clients moved away, at once and with no demand left,
        // though Kafka's window still measures some
        measured.put(ALICE, 100.0);
        round();
        assertEquals("0", redis.lastArgs().get(9));
        assertEquals(0.0, Double.parseDouble(redis.lastArgs().get(8)));
    }

    @Test
    void aSensorIsNotSilentBeforeTheMuteKafkaGaveItsLastRequestCanHaveEnded() {
        clock.set(100_000);
        redis.shares.put(ALICE.budgetId(), "1000");
        measured.put(ALICE, 960.0);
        round();
        round();
        // a burst took the window to 2.5 times the limit: Kafka mutes the clients for 1.5 windows (16.5 s), though
        // its mean throttle (many small ones before) is 3 s
        long request = clock.get();
        lastRequests.put(ALICE, request);
        throttles.put(ALICE, 3_000.0);
        measured.put(ALICE, 2_500.0);
        round();
        // the window empties while they wait: silent for longer than twice the mean throttle, the rate far under
        // half the limit, and still muted (a cut to the floor now would throttle the backlog for minutes)
        measured.put(ALICE, 100.0);
        while (clock.get() <= request + 16_500 + BudgetCoordinator.SILENT_MS) {
            round();
            assertEquals("1", redis.lastArgs().get(9), "muted at " + (clock.get() - 1_000 - request) + " ms");
            assertEquals(100.0, Double.parseDouble(redis.lastArgs().get(8)), 1e-6, "it wants what it measures");
        }
        // Kafka's mean throttle has left its window too: the predicted mute alone holds the share
        throttles.put(ALICE, 0.0);
        lastRequests.put(ALICE, clock.get() - 10_000);
        request = clock.get() - 10_000;
        measured.put(ALICE, 2_500.0);
        round();
        measured.put(ALICE, 100.0);
        round();
        assertEquals("1", redis.lastArgs().get(9), "no throttle metric, but its mute (16.5 s) is not over");
        // silent past the mute and two seconds: its clients left
        clock.set(request + 16_500 + BudgetCoordinator.SILENT_MS + 1);
        round();
        assertEquals("0", redis.lastArgs().get(9));
        assertEquals(0.0, Double.parseDouble(redis.lastArgs().get(8)));
    }

    @Test
    void aSensorFoundSilentStaysSoUntilItsClientsSendAgain() {
        clock.set(100_000);
        redis.shares.put(ALICE.budgetId(), "1000");
        measured.put(ALICE, 960.0);
        round();
        round();
        // its clients moved to another broker: silent past its mute, its window under half the share
        throttles.put(ALICE, 500.0);
        long request = clock.get();
        lastRequests.put(ALICE, request);
        measured.put(ALICE, 400.0);
        clock.set(request + 4_000);
        round();
        assertEquals("0", redis.lastArgs().get(9));
        assertEquals(0.0, Double.parseDouble(redis.lastArgs().get(8)));
        // the engine cuts its share to the floor; Kafka's window, still decaying, measures more than that floor
        // (and than half of it), and a throttle is still in Kafka's mean: silent still, nothing wanted
        redis.shares.put(ALICE.budgetId(), "50");
        for (double rate : new double[] {300, 200, 100}) {
            measured.put(ALICE, rate);
            round();
            assertEquals("0", redis.lastArgs().get(9), "a sensor its clients left does not take its share back");
            assertEquals(0.0, Double.parseDouble(redis.lastArgs().get(8)));
        }
        // its clients send again: it is muted (Kafka throttles them against the floor) and wants what it measures
        lastRequests.put(ALICE, clock.get());
        measured.put(ALICE, 120.0);
        round();
        assertEquals("1", redis.lastArgs().get(9));
        assertTrue(Double.parseDouble(redis.lastArgs().get(8)) >= 120.0, "it wants at least what it measures");
    }

    @Test
    void aMuteIsPredictedFromTheLimitItsRequestMetNotFromACutPublishedAfterIt() {
        start("0", "false"); // the cut published at once: what a request that came after it met
        clock.set(100_000);
        redis.shares.put(ALICE.budgetId(), "1000");
        measured.put(ALICE, 960.0);
        round();
        round();
        // a request half a second before the round that cuts the share to half (the demand's new broker took the
        // other half): Kafka throttled it against 1000, for 220 ms
        long request = clock.get() - 500;
        lastRequests.put(ALICE, request);
        measured.put(ALICE, 1_020.0);
        redis.shares.put(ALICE.budgetId(), "500");
        round();
        assertEquals(500.0, limit(ALICE));
        // its clients left: the window, now twice the new share, predicts no mute of that request (the old rule
        // held the sensor for 11 s more, (1000 - 500) / 500 of Kafka's window)
        measured.put(ALICE, 1_000.0);
        round();
        assertEquals("1", redis.lastArgs().get(9), "not silent for 2 s yet");
        measured.put(ALICE, 200.0);
        round();
        assertEquals("0", redis.lastArgs().get(9), "silent 2.5 s after a 220 ms mute");
        assertEquals(0.0, Double.parseDouble(redis.lastArgs().get(8)));
        // a request after the cut was published meets the cut: muted (1000 - 500) / 500 of the window, 11 s
        request = clock.get() - 500;
        lastRequests.put(ALICE, request);
        measured.put(ALICE, 1_000.0);
        round();
        measured.put(ALICE, 100.0);
        while (clock.get() <= request + 11_000 + BudgetCoordinator.SILENT_MS) {
            round();
            assertEquals("1", redis.lastArgs().get(9), "muted at " + (clock.get() - 1_000 - request) + " ms");
        }
        round();
        assertEquals("0", redis.lastArgs().get(9), "silent past its mute and two seconds");
    }

    @Test
    void silenceIsJudgedAgainstTheLimitTheLastRequestMetNotACutPublishedAfterIt() {
        clock.set(100_000);
        redis.shares.put(ALICE.budgetId(), "1000");
        measured.put(ALICE, 960.0);
        round();
        round();
        // its clients move to another broker; their last request met 1000, and the share is cut to half after it
        long request = clock.get() - 500;
        lastRequests.put(ALICE, request);
        measured.put(ALICE, 980.0);
        redis.shares.put(ALICE.budgetId(), "500");
        round();
        assertEquals("1", redis.lastArgs().get(9));
        // the window holds what the clients sent before they left (Kafka's samples leave it only after 11 s):
        // under the limit that request met, though over the cut (the old rule waited for its window to fall under
        // half the cut, several seconds more of half the budget on a broker its clients have left)
        measured.put(ALICE, 700.0);
        round();
        assertEquals("1", redis.lastArgs().get(9), "not silent for 2 s yet");
        round();
        assertEquals("0", redis.lastArgs().get(9), "silent 2.5 s, its window under the limit it last met");
        assertEquals(0.0, Double.parseDouble(redis.lastArgs().get(8)));
        // clients that send again meet the cut: a window over it would throttle their next request, so silence
        // is no evidence, however long (past the predicted mute too)
        request = clock.get() - 500;
        lastRequests.put(ALICE, request);
        for (int i = 0; i < 6; i++) {
            round();
            assertEquals("1", redis.lastArgs().get(9), "round " + i);
            assertTrue(Double.parseDouble(redis.lastArgs().get(8)) >= 700.0, "round " + i + ": wants its rate");
        }
    }

    @Test
    void aMuteIsPredictedFromTheWindowBeforeTheRequestWhenASampleLeftItSince() {
        clock.set(100_000);
        redis.shares.put(ALICE.budgetId(), "1000");
        measured.put(ALICE, 960.0);
        round();
        // a burst in Kafka's window: 1.5 times the share
        measured.put(ALICE, 1_500.0);
        round();
        // the last request came at 1.5 times the share (Kafka mutes it for half its window, 5.5 s), then the burst's
        // sample left the window before the round read it: this round measures 700, which alone predicts no mute
        long request = clock.get() - 500;
        lastRequests.put(ALICE, request);
        measured.put(ALICE, 700.0);
        while (clock.get() <= request + 5_500 + BudgetCoordinator.SILENT_MS) {
            round();
            assertEquals("1", redis.lastArgs().get(9), "muted at " + (clock.get() - 1_000 - request) + " ms");
        }
        round();
        assertEquals("0", redis.lastArgs().get(9), "silent past its mute and two seconds");
    }

    @Test
    void aMuteIsTheRateOverTheLimitTimesKafkasWindow() {
        assertEquals(16_500, BudgetCoordinator.muteMs(2_500, 1_000, 11));
        assertEquals(0, BudgetCoordinator.muteMs(1_000, 1_000, 11));
        assertEquals(0, BudgetCoordinator.muteMs(900, 1_000, 11));
        // a limit cut to a twentieth throttles a client at its old rate for 19 windows
        assertEquals(209_000, BudgetCoordinator.muteMs(1_000, 50, 11));
    }

    @Test
    void aNewValueOfBIsBOverLiveBrokersUntilTheNextRound() {
        redis.shares.put(ALICE.budgetId(), "1800");
        round();
        assertEquals(1_800.0, limit(ALICE));
        produce.update(EntityKey.user("alice"), 6_000); // Kafka's updateQuota: a new budget
        assertEquals(2_000.0, limit(ALICE), "6000 / 3 until a share for it");
        redis.shares.put(ALICE.budgetId(), "3600");
        round();
        assertEquals("6000", redis.lastArgs().get(7));
        assertEquals(3_600.0, limit(ALICE));
    }

    @Test
    void aValueThatIsNoLongerClusterWideIsPerBrokerAgain() {
        redis.shares.put(ALICE.budgetId(), "1800");
        round();
        assertEquals(1_800.0, limit(ALICE));
        redis.scope.clear();
        redis.version = "2";
        round();
        assertEquals(3_000.0, limit(ALICE));
        assertTrue(coordinator.quotaResetRequired(ClientQuotaType.PRODUCE));
        assertEquals(0, coordinator.view().limits.size());
    }

    @Test
    void withoutPortalDataEveryValueIsKafkas() {
        redis.scope.clear();
        redis.version = "";
        round();
        round();
        assertEquals(State.COORDINATED, coordinator.state());
        assertEquals(3_000.0, limit(ALICE));
        assertEquals(500.0, limit(BOB));
        // nothing was reported: no budget
        assertEquals(2, redis.keys.get(redis.keys.size() - 1).size());
    }

    @Test
    void aDefaultLevelBudgetIsOneBudgetPerUser() {
        produce.remove(EntityKey.user("alice"));
        produce.update(EntityKey.DEFAULT_USER, 900);
        redis.scope.clear();
        redis.scope.add("produce {\"user\":\"<default>\"}");
        SensorKey carol = new SensorKey(ClientQuotaType.PRODUCE, "carol", "");
        BudgetCoordinator c = new BudgetCoordinator(coordinator.settings(), redis, clock::get, null, () -> List.of(
                new SensorBudget(ALICE, EntityKey.DEFAULT_USER, 900), new SensorBudget(carol, EntityKey.DEFAULT_USER, 900)),
                s -> 0.0);
        c.liveBrokers(3);
        redis.shares.put(ALICE.budgetId(), "500");
        redis.shares.put(carol.budgetId(), "100");
        c.runRound();
        c.runRound();
        List<String> keys = redis.keys.get(redis.keys.size() - 1);
        assertEquals(4, keys.size(), keys.toString());
        assertEquals(500.0, c.limit(ALICE, produce.resolve("alice", "")));
        assertEquals(100.0, c.limit(carol, produce.resolve("carol", "")));
    }
}
