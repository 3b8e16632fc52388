package quotaportal.kafka.quota;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.EnumMap;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;

import org.apache.kafka.common.utils.internals.Sanitizer;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import quotaportal.kafka.quota.QuotaTable.EntityKey;

/**
 * The portal's quota groups and exempt principals, as the scope hash carries them (fields {@code group <json>} and
 * {@code exempt <principal>}; docs/internals/cluster-budgets-protocol.md), and the precedence they take in a
 * client's metric tags. Immutable once parsed, except a bounded cache of memberships, so the request path reads it
 * without a lock.
 *
 * <p>Per quota type, for a principal P (raw) and a client id C: an exempt P gets a sensor of its own, tags
 * {@code user=<P sanitized>,client-id=C}, with no quota; else Kafka's own tags when the level Kafka's precedence picks
 * in the type's {@link QuotaTable} names the client; else the first group in ascending (order, name) that the client is a member of and that has a value of
 * the type ({@code user="group@<name>",client-id=""}: a sanitized Kafka user never holds a raw '@'); else Kafka's.
 * A table answers for the types it was parsed for: a broker's for produce, fetch and request ({@link #BROKER}), a
 * controller's for controller mutations ({@link #CONTROLLER}: always per controller, never a cluster-wide budget).
 */
final class GroupTable {
    private static final Logger LOG = LoggerFactory.getLogger(BudgetQuotaCallback.class);
    static final String GROUP_FIELD = "group ";
    static final String EXEMPT_FIELD = "exempt ";
    static final String TAG_PREFIX = "group@";
    /** The types a broker's groups answer for (the controller applies controller mutations). */
    static final Set<ClientQuotaType> BROKER = Set.copyOf(
            EnumSet.of(ClientQuotaType.PRODUCE, ClientQuotaType.FETCH, ClientQuotaType.REQUEST));
    /** The types a controller's groups answer for. */
    static final Set<ClientQuotaType> CONTROLLER = Set.of(ClientQuotaType.CONTROLLER_MUTATION);
    static final GroupTable EMPTY = new GroupTable(List.of(), Set.of(), BROKER);
    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9._-]{1,64}");
    private static final int MAX_CACHED = 10_000;
    private static final Group[] NONE = new Group[4];
    private static final Map<String, ClientQuotaType> QUOTA_KEYS = Map.of(
            "producer_byte_rate", ClientQuotaType.PRODUCE,
            "consumer_byte_rate", ClientQuotaType.FETCH,
            "request_percentage", ClientQuotaType.REQUEST,
            "controller_mutation_rate", ClientQuotaType.CONTROLLER_MUTATION);

    /** One group: who is a member, and its value per quota type. */
    record Group(String name, int order, boolean any, Set<String> users, List<Glob> patterns, String prefix,
                 Map<ClientQuotaType, Double> quotas) {

        /** (any, or P one of users, or P matching a pattern) and (no prefix, or C starting with it). */
        boolean member(String principal, String clientId) {
            if (prefix != null && (clientId == null || !clientId.startsWith(prefix))) {
                return false;
            }
            if (any || users.contains(principal)) {
                return true;
            }
            for (Glob g : patterns) {
                if (g.matches(principal)) {
                    return true;
                }
            }
            return false;
        }

        Double quota(ClientQuotaType type) {
            return quotas.get(type);
        }

        /** The config entity of its values: the scope names a cluster-wide one {@code <type> {"group":"<name>"}}. */
        EntityKey entity() {
            return EntityKey.group(name);
        }

        String userTag() {
            return TAG_PREFIX + name;
        }
    }

    private record Client(String principal, String clientId) {
    }

    private final List<Group> groups;
    private final Map<String, Group> byName;
    private final Set<String> exempt;
    private final Set<String> exemptTags;
    private final Set<ClientQuotaType> types;
    /** Per client, the group that answers each budgetable type (index {@link #slot}), null entries for none. */
    private final ConcurrentHashMap<Client, Group[]> memberships = new ConcurrentHashMap<>();

    GroupTable(List<Group> groups, Set<String> exempt, Set<ClientQuotaType> types) {
        this.types = types;
        List<Group> sorted = new ArrayList<>(groups);
        sorted.sort(Comparator.comparingInt(Group::order).thenComparing(Group::name, Json::compareCodePoints));
        this.groups = List.copyOf(sorted);
        Map<String, Group> names = new HashMap<>();
        for (Group g : sorted) {
            names.put(g.name(), g);
        }
        this.byName = Map.copyOf(names);
        this.exempt = Set.copyOf(exempt);
        Set<String> sanitized = new HashSet<>();
        for (String principal : exempt) {
            sanitized.add(Sanitizer.sanitize(principal));
        }
        this.exemptTags = Set.copyOf(sanitized);
    }

    /** A broker's groups and exempt principals among a scope's fields (see {@link #parse(List, Set)}). */
    static GroupTable parse(List<String> scopeFields) {
        return parse(scopeFields, BROKER);
    }

    /**
     * The groups and exempt principals among a scope's fields, answering for {@code types} (the others are
     * ignored; a malformed group too).
     */
    static GroupTable parse(List<String> scopeFields, Set<ClientQuotaType> types) {
        List<Group> groups = new ArrayList<>();
        Set<String> exempt = new HashSet<>();
        Set<String> names = new HashSet<>();
        for (String field : scopeFields) {
            if (field.startsWith(EXEMPT_FIELD)) {
                exempt.add(field.substring(EXEMPT_FIELD.length()));
            } else if (field.startsWith(GROUP_FIELD)) {
                Group g = parseGroup(field.substring(GROUP_FIELD.length()));
                if (g == null || !names.add(g.name())) {
                    LOG.warn("quota budgets: ignoring the scope field {} (not a group definition, or a second one "
                            + "of its name)", field);
                } else {
                    groups.add(g);
                }
            }
        }
        return groups.isEmpty() && exempt.isEmpty() && types.equals(BROKER) ? EMPTY
                : new GroupTable(groups, exempt, types);
    }

    /** A group of its JSON ({@code {"any":..,"name":..,"order":..,"patterns":[..],"prefix":..,"quotas":{..},"users":[..]}}). */
    static Group parseGroup(String json) {
        try {
            if (!(Json.parse(json) instanceof Map<?, ?> m) || !(m.get("name") instanceof String name)
                    || !NAME.matcher(name).matches()) {
                return null;
            }
            int order = m.get("order") instanceof Double d ? d.intValue() : 0;
            boolean any = Boolean.TRUE.equals(m.get("any"));
            String prefix = m.get("prefix") instanceof String p ? p : null;
            Set<String> users = new HashSet<>();
            if (m.get("users") instanceof List<?> list) {
                for (Object u : list) {
                    if (u instanceof String s) {
                        users.add(s);
                    }
                }
            }
            List<Glob> patterns = new ArrayList<>();
            if (m.get("patterns") instanceof List<?> list) {
                for (Object p : list) {
                    if (p instanceof String s) {
                        patterns.add(new Glob(s));
                    }
                }
            }
            Map<ClientQuotaType, Double> quotas = new EnumMap<>(ClientQuotaType.class);
            if (m.get("quotas") instanceof Map<?, ?> q) {
                for (Map.Entry<?, ?> e : q.entrySet()) {
                    ClientQuotaType type = QUOTA_KEYS.get(e.getKey());
                    if (type != null && e.getValue() instanceof Double v) {
                        quotas.put(type, v);
                    }
                }
            }
            return new Group(name, order, any, Set.copyOf(users), List.copyOf(patterns), prefix, Map.copyOf(quotas));
        } catch (IllegalArgumentException e) {
            return null;
        }
    }

    boolean isEmpty() {
        return groups.isEmpty() && exempt.isEmpty();
    }

    List<Group> groups() {
        return groups;
    }

    boolean exempt(String principal) {
        return exempt.contains(principal);
    }

    /** Whether a sensor's user tag is an exempt principal's (its sanitized name): that sensor has no quota. */
    boolean exemptTag(String userTag) {
        return userTag != null && !userTag.isEmpty() && exemptTags.contains(userTag);
    }

    /** The group a {@code group@<name>} user tag names, or null (not a group tag, or a group no longer there). */
    Group byTag(String userTag) {
        return isGroupTag(userTag) ? byName.get(userTag.substring(TAG_PREFIX.length())) : null;
    }

    static boolean isGroupTag(String userTag) {
        return userTag != null && userTag.startsWith(TAG_PREFIX);
    }

    /**
     * The metric tags this table decides for a client (exempt, or a group's), or null when Kafka's own answer
     * stands: {@code table} is the type's Kafka values, {@code sanitizedUser} the principal as Kafka tags it.
     */
    Map<String, String> metricTags(ClientQuotaType type, String principal, String sanitizedUser, String clientId,
                                   QuotaTable table) {
        if (exempt.contains(principal)) {
            Map<String, String> own = tags(sanitizedUser);
            own.put(QuotaTable.CLIENT_ID_TAG, clientId); // a sensor of its own: no other client shares its limit
            return own;
        }
        if (groups.isEmpty() || !types.contains(type) || table.namesClient(sanitizedUser, clientId)) {
            return null;
        }
        Group g = groupOf(type, principal, clientId);
        return g == null ? null : tags(g.userTag());
    }

    /** Whether this table's groups answer for the type (a broker's: not controller mutations; a controller's: only). */
    boolean answers(ClientQuotaType type) {
        return types.contains(type);
    }

    /** The first group in (order, name) that the client is a member of and that has a value of the type. */
    Group groupOf(ClientQuotaType type, String principal, String clientId) {
        int slot = slot(type);
        if (slot < 0 || groups.isEmpty()) {
            return null;
        }
        Client key = new Client(principal, clientId);
        Group[] answers = memberships.get(key);
        if (answers == null) {
            answers = resolve(principal, clientId);
            if (memberships.size() >= MAX_CACHED) {
                memberships.clear(); // a bounded cache: clients past it are resolved again, never remembered forever
            }
            memberships.put(key, answers);
        }
        return answers[slot];
    }

    private Group[] resolve(String principal, String clientId) {
        Group[] out = null;
        for (Group g : groups) {
            if (!g.member(principal, clientId)) {
                continue;
            }
            for (Map.Entry<ClientQuotaType, Double> q : g.quotas().entrySet()) {
                int slot = slot(q.getKey());
                if (slot >= 0) {
                    out = out == null ? new Group[4] : out;
                    if (out[slot] == null) {
                        out[slot] = g;
                    }
                }
            }
        }
        return out == null ? NONE : out;
    }

    private static int slot(ClientQuotaType type) {
        return switch (type) {
            case PRODUCE -> 0;
            case FETCH -> 1;
            case REQUEST -> 2;
            case CONTROLLER_MUTATION -> 3;
            default -> -1;
        };
    }

    /**
     * The quota types whose tags or limits may answer differently under {@code after} than under this table: all
     * of them when the exempt principals changed, else each type the table answers for whose groups with a value of it
     * (membership, order, value) changed.
     */
    Set<ClientQuotaType> changed(GroupTable after) {
        Set<ClientQuotaType> out = EnumSet.noneOf(ClientQuotaType.class);
        if (!exempt.equals(after.exempt)) {
            out.addAll(EnumSet.allOf(ClientQuotaType.class));
            return out;
        }
        for (ClientQuotaType type : ClientQuotaType.values()) {
            boolean answered = types.contains(type) || after.types.contains(type);
            if (answered && !projection(type).equals(after.projection(type))) {
                out.add(type);
            }
        }
        return out;
    }

    private List<Group> projection(ClientQuotaType type) {
        List<Group> out = new ArrayList<>();
        for (Group g : groups) {
            Double v = g.quota(type);
            if (v != null) {
                out.add(new Group(g.name(), g.order(), g.any(), g.users(), g.patterns(), g.prefix(), Map.of(type, v)));
            }
        }
        return out;
    }

    private static Map<String, String> tags(String user) {
        Map<String, String> tags = new LinkedHashMap<>(4);
        tags.put(QuotaTable.USER_TAG, user);
        tags.put(QuotaTable.CLIENT_ID_TAG, "");
        return tags;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof GroupTable t && t.groups.equals(groups) && t.exempt.equals(exempt);
    }

    @Override
    public int hashCode() {
        return groups.hashCode() * 31 + exempt.hashCode();
    }
}
