package quotaportal.kafka.quota;

import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;

import org.apache.kafka.server.quota.ClientQuotaType;

/**
 * Who uses a group's quota: the members of a group share one Kafka sensor, so Kafka's metrics show the group's
 * total only. The request path counts, per group and member (sanitized user, client id) and quota type, the
 * requests it handed the group's tags out for (Kafka asks for the tags on every request); the background thread
 * exports them ({@link BudgetMBeans}). At most {@link #MAX_MEMBERS} members per group are tracked; the requests of
 * the others are counted together.
 */
final class GroupMembers {
    static final int MAX_MEMBERS = 1_000;

    /** A member as Kafka's own quota sensors name a client: the sanitized user and the client id. */
    record Member(String user, String clientId) {
    }

    /** A member's requests per budgetable quota type. */
    static final class Counts {
        final LongAdder produce = new LongAdder();
        final LongAdder fetch = new LongAdder();
        final LongAdder request = new LongAdder();

        LongAdder of(ClientQuotaType type) {
            return switch (type) {
                case PRODUCE -> produce;
                case FETCH -> fetch;
                default -> request;
            };
        }
    }

    /** One group's members, and the requests of members past the cap. */
    static final class Group {
        final ConcurrentHashMap<Member, Counts> members = new ConcurrentHashMap<>();
        final LongAdder untracked = new LongAdder();
    }

    private final ConcurrentHashMap<String, Group> groups = new ConcurrentHashMap<>();

    /** One request of a member whose tags for {@code type} are its group's ({@code group@<name>}). */
    void count(String userTag, ClientQuotaType type, String sanitizedUser, String clientId) {
        String name = userTag.substring(GroupTable.TAG_PREFIX.length());
        Group g = groups.get(name);
        if (g == null) {
            groups.putIfAbsent(name, new Group());
            g = groups.get(name);
            if (g == null) {
                return; // dropped by retain meanwhile: the group left the scope
            }
        }
        Member m = new Member(sanitizedUser, clientId);
        Counts c = g.members.get(m);
        if (c == null) {
            if (g.members.size() >= MAX_MEMBERS) {
                g.untracked.increment();
                return;
            }
            g.members.putIfAbsent(m, new Counts());
            c = g.members.get(m);
        }
        c.of(type).increment();
    }

    /** Forgets the groups no longer in the scope (the background thread, after a round). */
    void retain(Set<String> names) {
        groups.keySet().retainAll(names);
    }

    Map<String, Group> groups() {
        return groups;
    }
}
