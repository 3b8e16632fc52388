package quotaportal.kafka.quota;

import java.lang.management.ManagementFactory;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.function.Supplier;

import javax.management.Attribute;
import javax.management.AttributeList;
import javax.management.AttributeNotFoundException;
import javax.management.DynamicMBean;
import javax.management.InstanceAlreadyExistsException;
import javax.management.JMException;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanInfo;
import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.apache.kafka.server.quota.ClientQuotaType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The plugin's JMX MBeans, in the platform MBeanServer next to Kafka's own (the Prometheus JMX exporter scrapes them
 * with the rules of devtools/kafka/jmx-exporter.yml):
 *
 * <pre>
 *   kafka.server:type=quota-budget-callback
 *       state (off | coordinated | fallback), coordinated (1/0), fallback (1/0), rounds, failedRounds,
 *       lastRoundMs (the last round's duration), budgets (cluster-wide budgets on this broker), lastReported (the
 *       budgets the last good round carried: those whose report moved), sharesMoved, liveBrokers, lastError
 *   kafka.server:type=quota-budget,quota-type=Produce|Fetch|Request,user=U,client-id=C     (one per budget)
 *       share (the limit this broker enforces), demand (its estimate), budget (B), live-brokers
 *   kafka.server:type=quota-budget-group,group=G                                           (one per quota group)
 *       members (members tracked), untracked-requests (requests of members past the cap)
 *   kafka.server:type=quota-budget-group,group=G,user=U,client-id=C                      (one per member seen)
 *       produce-requests, fetch-requests, request-requests (requests the group's tags answered, per quota type)
 * </pre>
 *
 * Per-budget names follow Kafka's own quota sensors: the sanitized user and the client id as tags, a tag left out
 * when empty, values quoted as Kafka's JmxReporter quotes them.
 */
final class BudgetMBeans implements BudgetCoordinator.Listener {
    private static final Logger LOG = LoggerFactory.getLogger(BudgetQuotaCallback.class);
    static final String CALLBACK_NAME = "kafka.server:type=quota-budget-callback";

    private final MBeanServer server;
    private final Map<SensorKey, Budget> budgets = new HashMap<>();
    private final Map<String, GroupBeans> groups = new HashMap<>();
    private GroupMembers members;
    private ObjectName callbackName;

    BudgetMBeans() {
        this(ManagementFactory.getPlatformMBeanServer());
    }

    BudgetMBeans(MBeanServer server) {
        this.server = server;
    }

    /** The per-budget MBean's name for a sensor. */
    static ObjectName budgetName(SensorKey sensor) {
        return JmxRates.quotaName("kafka.server:type=quota-budget,quota-type=" + SensorKey.kafkaGroup(sensor.type()),
                sensor);
    }

    /** The per-member request counts to export with each round's groups. */
    synchronized void groupMembers(GroupMembers counts) {
        this.members = counts;
    }

    /** The name of a group's MBean, or with a member (a tag left out when empty) of its member's. */
    static ObjectName groupName(String group, GroupMembers.Member member) {
        String prefix = "kafka.server:type=quota-budget-group,group=" + group;
        if (member == null) {
            try {
                return new ObjectName(prefix);
            } catch (JMException e) {
                throw new IllegalArgumentException(prefix, e);
            }
        }
        return JmxRates.quotaName(prefix, new SensorKey(ClientQuotaType.PRODUCE, member.user(), member.clientId()));
    }

    /** The callback's MBean: the coordinator's state and counters ("off" without a coordinator). */
    synchronized void registerCallback(BudgetCoordinator coordinator) {
        Map<String, Attr> attrs = new LinkedHashMap<>();
        Supplier<BudgetCoordinator.State> state = () -> coordinator == null ? BudgetCoordinator.State.OFF
                : coordinator.state();
        attrs.put("state", new Attr(String.class, () -> state.get().label()));
        attrs.put("coordinated", new Attr(Integer.class, () -> state.get() == BudgetCoordinator.State.COORDINATED ? 1 : 0));
        attrs.put("fallback", new Attr(Integer.class, () -> state.get() == BudgetCoordinator.State.FALLBACK ? 1 : 0));
        attrs.put("rounds", new Attr(Long.class, () -> coordinator == null ? 0L : coordinator.rounds()));
        attrs.put("failedRounds", new Attr(Long.class, () -> coordinator == null ? 0L : coordinator.failedRounds()));
        attrs.put("lastRoundMs", new Attr(Long.class, () -> coordinator == null ? 0L : coordinator.lastRoundMs()));
        attrs.put("budgets", new Attr(Integer.class, () -> coordinator == null ? 0 : coordinator.view().limits.size()));
        attrs.put("lastReported", new Attr(Integer.class,
                () -> coordinator == null ? 0 : coordinator.lastReported()));
        attrs.put("sharesMoved", new Attr(Long.class, () -> coordinator == null ? 0L : coordinator.sharesMoved()));
        attrs.put("liveBrokers", new Attr(Integer.class, () -> coordinator == null ? 0 : coordinator.liveBrokers()));
        attrs.put("lastError", new Attr(String.class, () -> coordinator == null ? "" : coordinator.lastError()));
        try {
            callbackName = new ObjectName(CALLBACK_NAME);
            register(callbackName, new ReadOnly("The portal's quota budget callback", attrs));
        } catch (JMException e) {
            LOG.warn("quota budgets: cannot register {}: {}", CALLBACK_NAME, e.toString());
        }
    }

    @Override
    public synchronized void published(BudgetCoordinator coordinator, BudgetCoordinator.View view) {
        for (Map.Entry<SensorKey, BudgetCoordinator.Limit> e : view.limits.entrySet()) {
            Budget b = budgets.get(e.getKey());
            if (b == null) {
                b = new Budget();
                ObjectName name = budgetName(e.getKey());
                Budget values = b;
                Map<String, Attr> attrs = new LinkedHashMap<>();
                attrs.put("share", new Attr(Double.class, () -> values.limit.value()));
                attrs.put("demand", new Attr(Double.class, () -> values.limit.demand()));
                attrs.put("budget", new Attr(Double.class, () -> values.limit.budget()));
                attrs.put("live-brokers", new Attr(Integer.class, () -> values.live));
                b.name = name;
                b.limit = e.getValue();
                b.live = view.live;
                try {
                    register(name, new ReadOnly("A cluster-wide budget's share on this broker", attrs));
                } catch (JMException ex) {
                    LOG.warn("quota budgets: cannot register {}: {}", name, ex.toString());
                }
                budgets.put(e.getKey(), b);
            }
            b.limit = e.getValue();
            b.live = view.live;
        }
        budgets.entrySet().removeIf(e -> {
            if (view.limits.containsKey(e.getKey())) {
                return false;
            }
            unregister(e.getValue().name);
            return true;
        });
        if (members != null) {
            publishGroups(view.groups);
        }
    }

    /** An MBean per group of the scope and per member the request path counted; those of groups gone go. */
    private void publishGroups(GroupTable table) {
        Set<String> names = new HashSet<>();
        for (GroupTable.Group g : table.groups()) {
            names.add(g.name());
        }
        members.retain(names);
        groups.entrySet().removeIf(e -> {
            if (names.contains(e.getKey())) {
                return false;
            }
            e.getValue().unregisterAll();
            return true;
        });
        for (String name : names) {
            GroupBeans beans = groups.get(name);
            if (beans == null) {
                beans = new GroupBeans();
                groups.put(name, beans);
            }
            GroupMembers.Group counts = members.groups().get(name);
            if (beans.name == null || beans.counts != counts) {
                // (again) for the counts the request path holds now
                beans.unregisterAll();
                beans.counts = counts;
                GroupMembers.Group c = counts;
                Map<String, Attr> attrs = new LinkedHashMap<>();
                attrs.put("members", new Attr(Integer.class, () -> c == null ? 0 : c.members.size()));
                attrs.put("untracked-requests", new Attr(Long.class, () -> c == null ? 0L : c.untracked.sum()));
                beans.name = tryRegister(groupName(name, null), "A quota group on this broker", attrs);
            }
            if (counts == null) {
                continue;
            }
            for (Map.Entry<GroupMembers.Member, GroupMembers.Counts> e : counts.members.entrySet()) {
                if (!beans.members.containsKey(e.getKey())) {
                    GroupMembers.Counts c = e.getValue();
                    Map<String, Attr> attrs = new LinkedHashMap<>();
                    attrs.put("produce-requests", new Attr(Long.class, () -> c.produce.sum()));
                    attrs.put("fetch-requests", new Attr(Long.class, () -> c.fetch.sum()));
                    attrs.put("request-requests", new Attr(Long.class, () -> c.request.sum()));
                    beans.members.put(e.getKey(), tryRegister(groupName(name, e.getKey()),
                            "A quota group member's requests on this broker", attrs));
                }
            }
        }
    }

    private ObjectName tryRegister(ObjectName name, String description, Map<String, Attr> attrs) {
        try {
            register(name, new ReadOnly(description, attrs));
            return name;
        } catch (JMException e) {
            LOG.warn("quota budgets: cannot register {}: {}", name, e.toString());
            return null;
        }
    }

    synchronized void close() {
        for (Budget b : budgets.values()) {
            unregister(b.name);
        }
        budgets.clear();
        for (GroupBeans g : groups.values()) {
            g.unregisterAll();
        }
        groups.clear();
        if (callbackName != null) {
            unregister(callbackName);
            callbackName = null;
        }
    }

    private void register(ObjectName name, DynamicMBean bean) throws JMException {
        try {
            server.registerMBean(bean, name);
        } catch (InstanceAlreadyExistsException e) {
            // left by an earlier instance in this JVM (a reconfigured broker): ours replaces it
            server.unregisterMBean(name);
            server.registerMBean(bean, name);
        }
    }

    private void unregister(ObjectName name) {
        try {
            if (name != null && server.isRegistered(name)) {
                server.unregisterMBean(name);
            }
        } catch (JMException e) {
            LOG.debug("unregistering {}", name, e);
        }
    }

    private static final class Budget {
        ObjectName name;
        volatile BudgetCoordinator.Limit limit;
        volatile int live;
    }

    /** A group's MBeans: its own and its members'. */
    private final class GroupBeans {
        ObjectName name;
        GroupMembers.Group counts;
        final Map<GroupMembers.Member, ObjectName> members = new HashMap<>();

        void unregisterAll() {
            unregister(name);
            name = null;
            for (ObjectName m : members.values()) {
                unregister(m);
            }
            members.clear();
        }
    }

    private record Attr(Class<?> type, Supplier<Object> value) {
    }

    /** A read-only MBean whose attribute names are exactly the keys given (Kafka-style names with '-'). */
    private static final class ReadOnly implements DynamicMBean {
        private final String description;
        private final Map<String, Attr> attrs;

        ReadOnly(String description, Map<String, Attr> attrs) {
            this.description = description;
            this.attrs = attrs;
        }

        @Override
        public Object getAttribute(String attribute) throws AttributeNotFoundException {
            Attr a = attrs.get(attribute);
            if (a == null) {
                throw new AttributeNotFoundException(attribute);
            }
            return a.value().get();
        }

        @Override
        public void setAttribute(Attribute attribute) {
            throw new UnsupportedOperationException("read-only");
        }

        @Override
        public AttributeList getAttributes(String[] attributes) {
            AttributeList list = new AttributeList();
            for (String name : attributes) {
                Attr a = attrs.get(name);
                if (a != null) {
                    list.add(new Attribute(name, a.value().get()));
                }
            }
            return list;
        }

        @Override
        public AttributeList setAttributes(AttributeList attributes) {
            return new AttributeList();
        }

        @Override
        public Object invoke(String actionName, Object[] params, String[] signature) {
            throw new UnsupportedOperationException(actionName);
        }

        @Override
        public MBeanInfo getMBeanInfo() {
            MBeanAttributeInfo[] infos = attrs.entrySet().stream()
                    .map(e -> new MBeanAttributeInfo(e.getKey(), e.getValue().type().getName(), e.getKey(), true, false,
                            false))
                    .toArray(MBeanAttributeInfo[]::new);
            return new MBeanInfo(ReadOnly.class.getName(), description, infos, null, null, null);
        }
    }
}
