package quotaportal.kafka.quota;

import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumMap;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;

import org.apache.kafka.server.quota.ClientQuotaType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import quotaportal.kafka.quota.QuotaTable.EntityKey;

/**
 * This broker's side of the cluster-wide budgets (docs/internals/cluster-budgets-protocol.md): one round at a time,
 * run by the plugin's background thread, and the snapshot ({@link View}) the hot path reads.
 *
 * <p>A round: the live sensors whose resolving config entity is cluster-wide (the scope the engine last answered)
 * are reported with their budget B, their demand ({@link DemandEstimator}) and whether they are saturated (the rate
 * Kafka measures at or above 95 % of the share enforced); only those whose report moved go to {@code budget_share.lua}
 * ({@link ReportDelta}), which answers their shares and those other brokers' reports moved; the rest are kept. Then
 * every cluster-wide sensor's limit is published: the share while the last successful round is at most the lease
 * old, else (Redis away or slow for longer, or a new budget with no share yet) {@code B / live brokers} (live = the
 * brokers of the cluster metadata, at least 1): never unlimited, never zero; a share cut under what a saturated
 * sensor's window measures is held there for a moment ({@link LimitShaper#drained}), and a sensor whose window is
 * filling again rises to its share with it ({@link LimitShaper#ramped}). The state is {@code coordinated}
 * within the lease and {@code fallback} after it (and from start until the first successful round: a restarted
 * broker starts from the fallback); each transition is logged once. When a published limit moved, the quota type's
 * {@link #quotaResetRequired} answers true once, so Kafka re-reads its sensors' limits.
 *
 * <p>Clock, Redis, rates and sensors are injected: the tests drive the state machine with fakes of
 * {@link BudgetRedis} and a clock of their own.
 */
final class BudgetCoordinator {
    private static final Logger LOG = LoggerFactory.getLogger(BudgetQuotaCallback.class);
    /** A sensor is saturated when its measured rate is at least this fraction of the share it enforces ... */
    static final double SATURATED = 0.95;
    /**
     * A sensor whose demand estimate has stayed under this fraction of its share for {@link #FALLING_ROUNDS} rounds
     * is not saturated, whatever its windowed rate: after its clients moved to another broker, Kafka's rate takes
     * the whole window to decay and would hold half of the budget there meanwhile. (One round is not enough: the
     * estimate's slope term swings that far now and then while a client is held at its limit.)
     */
    static final double FALLING = 0.5;
    static final int FALLING_ROUNDS = 3;
    /** A share that rose by at most this fraction is not worth a reset of Kafka's limits (a fall always is). */
    static final double SMALL_RISE = 0.01;

    enum State {
        OFF, COORDINATED, FALLBACK;

        String label() {
            return name().toLowerCase(Locale.ROOT);
        }
    }

    /** A live sensor with a quota: its tags, the config entity its value comes from, and that value (B). */
    /** ... and {@code lastRequestMs}, when its last request came ({@code -1}: not known). */
    record SensorBudget(SensorKey sensor, EntityKey entity, double budget, long lastRequestMs) {
        SensorBudget(SensorKey sensor, EntityKey entity, double budget) {
            this(sensor, entity, budget, -1L);
        }
    }

    /**
     * A throttled client sends nothing while Kafka mutes it, so silence is not demand gone while it is throttled,
     * unless the silence lasts longer than this and than twice its mean throttle time: then its clients moved away.
     */
    static final long SILENT_MS = 2000;

    /**
     * How long Kafka mutes the clients of a sensor whose windowed rate reached {@code rate} under {@code limit}
     * (ms): {@code (rate - limit) / limit} of its throttle window, unbounded (Kafka's {@code QuotaUtils.throttleTime}
     * for produce and fetch). 0 when the rate is within the limit.
     */
    static long muteMs(double rate, double limit, double throttleWindowSeconds) {
        if (!(limit > 0) || !(rate > limit)) {
            return 0;
        }
        return (long) Math.ceil((rate - limit) / limit * throttleWindowSeconds * 1000);
    }

    /**
     * The last request of a sensor, how long Kafka may mute its clients after it (ms, the request's clock) and the
     * limit Kafka applied to it.
     */
    private record Mute(long requestMs, long untilMs, double limit) {
    }

    /** The limit a sensor enforces, since when (ms: the round that published it ended) and the one before it. */
    private record Enforced(double value, long sinceMs, double before) {
        /** The limit Kafka applied to a request at {@code requestMs} (it reads a new limit at the next request). */
        double at(long requestMs) {
            return requestMs >= sinceMs ? value : before;
        }
    }

    /** The sensors Kafka has now (those the hot path handed tags out for, still registered). */
    interface SensorSource {
        List<SensorBudget> sensors();
    }

    /** The rate Kafka measures for a sensor (units of its quota type per second); NaN when unknown. */
    interface RateSource {
        double rate(SensorKey sensor);

        /** Kafka's mean throttle time (ms) of the sensor within its metrics window; 0 when none. */
        default double throttleMs(SensorKey sensor) {
            return 0;
        }
    }

    /** Told after every round what was published (the MBeans). */
    interface Listener {
        void published(BudgetCoordinator coordinator, View view);
    }

    /** A quota type and a config entity: one quota value, as the scope names it. */
    record TypedEntity(ClientQuotaType type, EntityKey entity) {
    }

    /** The limit published for one cluster-wide sensor, valid for the entity and B it was computed for. */
    record Limit(EntityKey entity, double budget, double value, double demand) {
    }

    /**
     * What the hot path reads: immutable, swapped whole (the groups with the cluster-wide values of the same scope,
     * so that a group's budget is never read as per broker for a moment).
     */
    static final class View {
        static final View EMPTY = new View(Map.of(), Map.of(), 1, State.FALLBACK, GroupTable.EMPTY);

        final Map<TypedEntity, String> clusterWide;
        final Map<SensorKey, Limit> limits;
        final int live;
        final State state;
        /** The scope's quota groups and exempt principals: none until the first successful round. */
        final GroupTable groups;

        View(Map<TypedEntity, String> clusterWide, Map<SensorKey, Limit> limits, int live, State state,
             GroupTable groups) {
            this.clusterWide = clusterWide;
            this.limits = limits;
            this.live = live;
            this.state = state;
            this.groups = groups;
        }
    }

    private record Held(EntityKey entity, double budget, double share) {
    }

    /** One cluster-wide sensor's report in a round: its scope field, demand and saturation. */
    record Report(SensorBudget sensor, String scopeField, double demand, boolean saturated) {
    }

    private final BudgetSettings settings;
    private final BudgetRedis redis;
    private final LongSupplier clockMs;
    private final LongSupplier engineClockMs;
    private final SensorSource sensors;
    private final RateSource rates;
    private final String prefix;
    private final EnumMap<ClientQuotaType, AtomicBoolean> resets = new EnumMap<>(ClientQuotaType.class);
    private volatile Listener listener;

    private volatile View view = View.EMPTY;
    private volatile int liveBrokers = 1;
    private volatile State state = State.FALLBACK;

    // the background thread's own (runRound is synchronized, for the tests that call it from theirs)
    private String scopeVersion = "";
    private boolean scopeKnown;
    private Map<SensorKey, Held> held = Map.of();
    /** What the engine holds of this broker's reports: only what moved is sent. */
    private final ReportDelta delta = new ReportDelta();
    private final Map<SensorKey, DemandEstimator> estimators = new HashMap<>();
    private final Set<SensorKey> saturated = new java.util.HashSet<>();
    private final Map<SensorKey, Integer> falling = new HashMap<>();
    private final Map<SensorKey, Mute> mutes = new HashMap<>();
    private final Map<SensorKey, Enforced> enforcedSince = new HashMap<>();
    /** When the last round's limits were published (its end): a request before it met the limits before. */
    private long publishedMs = Long.MIN_VALUE;
    /** Per sensor found silent: the last request it had then. Silent it stays until a request comes after it. */
    private final Map<SensorKey, Long> silentAfter = new HashMap<>();
    /** How a share becomes the limit Kafka enforces (the drain hold, the window ramp). */
    private final LimitShaper shaper;
    private long lastSuccessMs = Long.MIN_VALUE;
    private boolean failing;

    private final AtomicLong rounds = new AtomicLong();
    private final AtomicLong failedRounds = new AtomicLong();
    private final AtomicLong sharesMoved = new AtomicLong();
    private volatile long lastRoundMs;
    private volatile int lastReported;
    private volatile String lastError = "";

    /**
     * @param engineClockMs the time sent as ARGV[5], or null to send '' (Redis's own clock: production, so that
     *                      brokers' clocks never disagree)
     */
    BudgetCoordinator(BudgetSettings settings, BudgetRedis redis, LongSupplier clockMs, LongSupplier engineClockMs,
                      SensorSource sensors, RateSource rates) {
        this.settings = settings;
        this.shaper = new LimitShaper(settings);
        this.redis = redis;
        this.clockMs = clockMs;
        this.engineClockMs = engineClockMs;
        this.sensors = sensors;
        this.rates = rates;
        this.prefix = "qb:{" + settings.cluster() + "}:";
        for (ClientQuotaType type : ClientQuotaType.values()) {
            resets.put(type, new AtomicBoolean(false));
        }
    }

    void listener(Listener listener) {
        this.listener = listener;
    }

    // -- the hot path ------------------------------------------------------------------------------------------------

    /**
     * The limit Kafka enforces for a sensor whose value resolved to {@code resolved}: B unless its entity is
     * cluster-wide; then the published share, or B / live brokers until the sensor has one for this very B.
     */
    double limit(SensorKey sensor, QuotaTable.Resolved resolved) {
        return limit(sensor.type(), sensor.user(), sensor.clientId(), resolved);
    }

    /** {@link #limit(SensorKey, QuotaTable.Resolved)} of a sensor's type and tags. */
    double limit(ClientQuotaType type, String userTag, String clientIdTag, QuotaTable.Resolved resolved) {
        View v = view;
        if (v.clusterWide.isEmpty() || !SensorKey.budgetable(type)
                || !v.clusterWide.containsKey(new TypedEntity(type, resolved.entity()))) {
            return resolved.bound();
        }
        Limit limit = v.limits.get(new SensorKey(type, userTag, clientIdTag));
        if (limit != null && limit.budget() == resolved.bound() && limit.entity().equals(resolved.entity())) {
            return limit.value();
        }
        return resolved.bound() / v.live;
    }

    /** True once after the type's limits moved (Kafka asks on every request: a read unless there is news). */
    boolean quotaResetRequired(ClientQuotaType type) {
        AtomicBoolean flag = resets.get(type);
        return flag.get() && flag.getAndSet(false);
    }

    /** The brokers of the cluster metadata (Kafka's updateClusterMetadata): the fallback's divisor. */
    void liveBrokers(int count) {
        liveBrokers = Math.max(1, count);
    }

    // -- one round -------------------------------------------------------------------------------------------------

    /**
     * One round: report, take the shares, publish. Returns true when the scope changed (the caller runs another
     * round at once, so that budgets that just became cluster-wide are reported without waiting an interval).
     */
    synchronized boolean runRound() {
        long now = clockMs.getAsLong();
        long started = System.nanoTime();
        List<SensorBudget> live = sensors.sensors();
        View before = view;
        List<Report> reports = new ArrayList<>();
        for (SensorBudget s : live) {
            String field = scopeKnown ? before.clusterWide.get(new TypedEntity(s.sensor().type(), s.entity())) : null;
            if (field == null || !SensorKey.budgetable(s.sensor().type())) {
                continue;
            }
            double rate = rates.rate(s.sensor());
            if (Double.isNaN(rate)) {
                rate = 0;
            }
            shaper.measured(s.sensor(), rate, now);
            DemandEstimator estimator = estimators.computeIfAbsent(s.sensor(),
                    k -> new DemandEstimator(settings.rateWindowSeconds()));
            double rateBefore = estimator.lastRate();
            double demand = estimator.update(rate, now);
            double enforced = limit(s.sensor(), new QuotaTable.Resolved(s.entity(), s.budget()));
            // A client Kafka throttled lately is muted now and then: its windowed rate and the demand estimate fall
            // while it waits, which is not demand gone. Cutting its share then would make Kafka throttle it for
            // (rate - share) / share windows at its next request, and the longer wait would look like less demand
            // still. So a throttled sensor is saturated and wants at least what it measures.
            double throttle = rates.throttleMs(s.sensor());
            // Silence is only evidence once Kafka would have let its clients speak: a sensor whose window still
            // measures more than the limit its last request met would have that request throttled now, and may be
            // muted yet if the mute predicted below fell short (cutting it then mutes it for longer still). Under
            // that limit, past the predicted mute, its clients could have sent: half the limit (the rule before)
            // held an old leader for as long as its last burst stayed in Kafka's window, up to 11 s, its clients
            // gone. A share cut after that request mutes nobody until the clients send again, so it is not the
            // measure either.
            // Nor is silence evidence before the mute Kafka gave the last request can have ended: a mute longer
            // than the window empties the window (the rate falls under the limit while the clients wait) and
            // can outlast twice the mean throttle; a release then cuts the share to the floor, and the backlog the
            // client sends when it may is throttled against the floor for minutes (0.06 B delivered under load).
            long mutedUntil = mutedUntil(s, Math.max(rate, rateBefore), enforced);
            Mute mute = mutes.get(s.sensor());
            double met = mute == null ? enforced : mute.limit();
            // Once silent, a sensor stays so until its clients send again: its share is cut to the floor then, and
            // its window, still decaying, would measure more than half of that floor (and more than the floor: full
            // again) and take the share back for as long as the window lasts, on a broker its clients have left.
            boolean silent = s.lastRequestMs() >= 0 && (Long.valueOf(s.lastRequestMs()).equals(silentAfter.get(
                    s.sensor())) || now - s.lastRequestMs() > Math.max(SILENT_MS, 2 * throttle)
                    && now > mutedUntil + SILENT_MS && rate < met);
            if (silent) {
                silentAfter.put(s.sensor(), s.lastRequestMs());
            } else {
                silentAfter.remove(s.sensor());
            }
            boolean muted = (throttle > 0 || now <= mutedUntil) && !silent;
            if (muted) {
                demand = Math.max(demand, rate);
            }
            if (silent) {
                // nothing came for longer than any mute: its clients left or stopped, whatever the window still says
                demand = 0;
            }
            // saturated once the rate reaches the share; from then on only silence, or demand gone for
            // FALLING_ROUNDS rounds without a throttle, ends it
            boolean full = !silent && (muted || saturated.contains(s.sensor()) || rate >= SATURATED * enforced);
            int low = !muted && demand < FALLING * enforced ? falling.merge(s.sensor(), 1, Integer::sum) : 0;
            if (low == 0) {
                falling.remove(s.sensor());
            }
            full = full && low < FALLING_ROUNDS;
            if (full) {
                saturated.add(s.sensor());
            } else {
                saturated.remove(s.sensor());
            }
            reports.add(new Report(s, field, demand, full));
            if (LOG.isTraceEnabled()) {
                LOG.trace("quota budgets: {} rate {} demand {} enforced {} saturated {} throttle {} quiet {} muted {}",
                        s.sensor().budgetId(), rate, demand, enforced, full, throttle,
                        s.lastRequestMs() < 0 ? -1 : now - s.lastRequestMs(),
                        mutedUntil == Long.MIN_VALUE ? -1 : mutedUntil - now);
            }
        }
        boolean scopeChanged = false;
        ReportDelta.Selection sending = delta.select(reports, r -> limit(r.sensor().sensor(),
                new QuotaTable.Resolved(r.sensor().entity(), r.sensor().budget())), now, settings.leaseMs(),
                settings.floorFraction());
        try {
            BudgetRedis.Reply reply = redis.round(sending.keys(prefix), sending.args(settings,
                    engineClockMs == null ? "" : Long.toString(engineClockMs.getAsLong()), scopeKnown ? scopeVersion : ""));
            int asked = sending.reports().size() + sending.leaving().size();
            lastReported = asked;
            if (reply.shares().size() != asked) {
                throw new IllegalStateException("budget_share.lua answered " + reply.shares().size() + " shares for "
                        + asked + " budgets");
            }
            scopeChanged = !scopeKnown || !reply.scopeVersion().equals(scopeVersion);
            Map<TypedEntity, String> clusterWide = before.clusterWide;
            GroupTable groups = before.groups;
            if (scopeChanged) {
                clusterWide = parseScope(reply.scope());
                groups = GroupTable.parse(reply.scope());
                scopeVersion = reply.scopeVersion();
                scopeKnown = true;
            }
            held = taken(reports, sending, reply, now);
            lastSuccessMs = now;
            rounds.incrementAndGet();
            if (failing) {
                LOG.info("quota budgets: Redis answers again ({} budgets); coordinating", reports.size());
                failing = false;
            }
            publish(now, live, clusterWide, groups);
        } catch (Exception e) {
            delta.failed();
            failedRounds.incrementAndGet();
            lastError = e.toString();
            if (!failing) {
                failing = true;
                LOG.warn("quota budgets: a round with the engine's Redis failed ({}); keeping the last shares for the "
                        + "lease ({} ms), then budget / live brokers", e, settings.leaseMs());
            }
            publish(now, live, before.clusterWide, before.groups); // the last known scope and groups
        } finally {
            lastRoundMs = (System.nanoTime() - started) / 1_000_000;
            publishedMs = clockMs.getAsLong();
        }
        // a sensor gone (Kafka expired it) needs no estimate any more
        if (estimators.size() > live.size()) {
            Set<SensorKey> keep = new java.util.HashSet<>();
            for (SensorBudget s : live) {
                keep.add(s.sensor());
            }
            estimators.keySet().retainAll(keep);
            saturated.retainAll(keep);
            falling.keySet().retainAll(keep);
            mutes.keySet().retainAll(keep);
            enforcedSince.keySet().retainAll(keep);
            silentAfter.keySet().retainAll(keep);
            shaper.retain(keep);
        }
        return scopeChanged;
    }

    /**
     * Until when (ms) Kafka may mute the sensor's clients after their last request: the mute its rate over the
     * limit Kafka applied to that request implies, computed once, at the first round that sees the request. The
     * rate is the larger of this round's (read after the request was recorded) and the round before's (read
     * before it): Kafka's window drops a 1 s sample at a time, and a burst's sample that left it between the
     * request and this round took the rate from 0.98 to 0.65 of B under a share of 0.49 B (traced: a mute of 11 s
     * predicted as 3.6 s, the broker released, and the records it was holding back took half the budget back from
     * the new leader when they came). A limit published after the request does not extend it: Kafka throttled
     * the request when it came, so a share cut since then (the demand's new broker took half of it) would predict
     * a mute that never happens and hold a broker its clients left for up to a window more. {@code Long.MIN_VALUE}
     * when no request is known.
     */
    private long mutedUntil(SensorBudget s, double rate, double enforced) {
        Enforced limit = enforcedSince.get(s.sensor());
        if (limit == null) {
            limit = new Enforced(enforced, Long.MIN_VALUE, enforced);
        } else if (!same(limit.value(), enforced)) {
            limit = new Enforced(enforced, publishedMs, limit.value());
        }
        enforcedSince.put(s.sensor(), limit);
        long request = s.lastRequestMs();
        if (request < 0) {
            mutes.remove(s.sensor());
            return Long.MIN_VALUE;
        }
        Mute was = mutes.get(s.sensor());
        if (was != null && was.requestMs() == request) {
            return was.untilMs();
        }
        double met = limit.at(request);
        long until = request + muteMs(rate, met, settings.throttleWindowSeconds());
        mutes.put(s.sensor(), new Mute(request, until, met));
        return until;
    }

    /**
     * The shares held after a good round: those the engine answered for what was reported, those it moved for
     * budgets not reported, the rest as they were (none for a sensor no longer reported).
     */
    private Map<SensorKey, Held> taken(List<Report> reports, ReportDelta.Selection sending, BudgetRedis.Reply reply,
                                       long now) {
        Map<SensorKey, Held> taken = new HashMap<>();
        for (Report r : reports) {
            Held h = held.get(r.sensor().sensor());
            if (h != null) {
                taken.put(r.sensor().sensor(), h);
            }
        }
        List<Boolean> answered = new ArrayList<>(sending.reports().size());
        for (int i = 0; i < sending.reports().size(); i++) {
            String share = reply.shares().get(i);
            SensorBudget s = sending.reports().get(i).sensor();
            answered.add(!share.isEmpty());
            if (share.isEmpty()) {
                taken.remove(s.sensor());
            } else {
                taken.put(s.sensor(), new Held(s.entity(), s.budget(), Double.parseDouble(share)));
            }
        }
        for (Map.Entry<String, String> moved : reply.moved().entrySet()) {
            Report r = delta.sent(moved.getKey());
            if (r != null && taken.containsKey(r.sensor().sensor())) {
                taken.put(r.sensor().sensor(), new Held(r.sensor().entity(), r.sensor().budget(),
                        Double.parseDouble(moved.getValue())));
            }
        }
        delta.accepted(sending, answered, reply.resync(), now);
        return taken;
    }

    private static Map<TypedEntity, String> parseScope(List<String> fields) {
        Map<TypedEntity, String> out = new HashMap<>();
        for (String field : fields) {
            int space = field.indexOf(' ');
            if (space < 0) {
                continue;
            }
            ClientQuotaType type = switch (field.substring(0, space)) {
                case "produce" -> ClientQuotaType.PRODUCE;
                case "fetch" -> ClientQuotaType.FETCH;
                case "request" -> ClientQuotaType.REQUEST;
                default -> null;
            };
            EntityKey entity = type == null ? null : EntityKey.fromField(field.substring(space + 1));
            if (entity != null) {
                out.put(new TypedEntity(type, entity), field);
            }
        }
        return Collections.unmodifiableMap(out);
    }

    /** Each cluster-wide sensor's limit now; a reset for every quota type whose limits moved. */
    private void publish(long now, List<SensorBudget> live, Map<TypedEntity, String> clusterWide, GroupTable groups) {
        boolean leased = lastSuccessMs != Long.MIN_VALUE && now - lastSuccessMs <= settings.leaseMs();
        State next = leased ? State.COORDINATED : State.FALLBACK;
        if (next != state) {
            if (next == State.FALLBACK) {
                LOG.warn("quota budgets: no successful round for {} ms (the lease); enforcing budget / live brokers "
                        + "({}) for every cluster-wide budget until Redis answers", settings.leaseMs(), liveBrokers);
            } else {
                LOG.info("quota budgets: coordinated with the engine (cluster {}, broker {})", settings.cluster(),
                        settings.brokerId());
            }
            state = next;
        }
        int brokers = liveBrokers;
        Map<SensorKey, Limit> limits = new HashMap<>();
        for (SensorBudget s : live) {
            if (!clusterWide.containsKey(new TypedEntity(s.sensor().type(), s.entity()))) {
                continue;
            }
            Held h = held.get(s.sensor());
            double value = leased && h != null && h.budget() == s.budget() && h.entity().equals(s.entity())
                    ? h.share() : s.budget() / brokers;
            Limit was = view.limits.get(s.sensor());
            DemandEstimator estimator = estimators.get(s.sensor());
            boolean same = was != null && was.budget() == s.budget() && was.entity().equals(s.entity());
            value = shaper.drained(s.sensor(), now, value, leased && same ? was.value() : Double.NaN,
                    estimator == null ? 0 : estimator.lastRate(), saturated.contains(s.sensor()));
            if (same && value > was.value()
                    && value <= was.value() * (1 + SMALL_RISE)) {
                // a rise within 1 %: keep enforcing the last value (less than the engine grants, so the sum stays
                // within B) and spare Kafka a walk over its sensors every round for nothing
                value = was.value();
            }
            value = shaper.ramped(s.sensor(), now, value, same ? was.value() : s.budget() / brokers,
                    s.budget() * settings.floorFraction() / brokers);
            limits.put(s.sensor(), new Limit(s.entity(), s.budget(), value, estimator == null ? 0 : estimator.last()));
        }
        View before = view;
        View after = new View(clusterWide, Collections.unmodifiableMap(limits), brokers, next, groups);
        Set<ClientQuotaType> moved = EnumSet.noneOf(ClientQuotaType.class);
        long movedCount = 0;
        for (Map.Entry<SensorKey, Limit> e : limits.entrySet()) {
            Limit old = before.limits.get(e.getKey());
            if (old == null || !same(old.value(), e.getValue().value())) {
                moved.add(e.getKey().type());
                movedCount++;
            }
        }
        for (SensorKey gone : before.limits.keySet()) {
            if (!limits.containsKey(gone)) {
                moved.add(gone.type());
            }
        }
        if (!before.clusterWide.equals(clusterWide) || before.live != brokers) {
            // sensors nobody reported yet answer B or B / live from the scope: every budget type may have moved
            moved.addAll(List.of(ClientQuotaType.PRODUCE, ClientQuotaType.FETCH, ClientQuotaType.REQUEST));
        }
        // a group's value or members, or the exempt principals, changed: the limits of Kafka's sensors may have
        moved.addAll(before.groups.changed(groups));
        view = after;
        sharesMoved.addAndGet(movedCount);
        for (ClientQuotaType type : moved) {
            resets.get(type).set(true);
        }
        Listener l = listener;
        if (l != null) {
            l.published(this, after);
        }
    }

    private static boolean same(double a, double b) {
        return a == b || Math.abs(a - b) <= 1e-9 * Math.max(1.0, Math.abs(b));
    }

    // -- what it exports ---------------------------------------------------------------------------------------------

    View view() {
        return view;
    }

    State state() {
        return state;
    }

    long rounds() {
        return rounds.get();
    }

    long failedRounds() {
        return failedRounds.get();
    }

    long sharesMoved() {
        return sharesMoved.get();
    }

    long lastRoundMs() {
        return lastRoundMs;
    }

    /** How many budgets the last good round carried (reported or left): only those whose report moved. */
    int lastReported() {
        return lastReported;
    }

    String lastError() {
        return lastError;
    }

    int liveBrokers() {
        return liveBrokers;
    }

    BudgetSettings settings() {
        return settings;
    }

    /** Its Redis client, for the controller's {@link ScopeReader} once the role turns out to be the controller's. */
    BudgetRedis redis() {
        return redis;
    }

    void close() {
        try {
            redis.close();
        } catch (Exception e) {
            LOG.debug("closing the budget Redis connection", e);
        }
    }
}
