package quotaportal.kafka.quota;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.Test;

import quotaportal.kafka.quota.QuotaTable.EntityKey;

/** The scope's group and exempt fields as the portal writes them, membership, and which group answers a client. */
class GroupTableTest {

    /** A group field as the portal writes it (compact JSON, sorted keys). */
    static String group(String name, int order, boolean any, String patterns, String prefix, String quotas,
                        String users) {
        return "group {\"any\":" + any + ",\"name\":\"" + name + "\",\"order\":" + order + ",\"patterns\":[" + patterns
                + "],\"prefix\":" + (prefix == null ? "null" : "\"" + prefix + "\"") + ",\"quotas\":{" + quotas
                + "},\"users\":[" + users + "]}";
    }

    @Test
    void parsesTheGroupFieldsTheExemptFieldsAndIgnoresTheRest() {
        GroupTable t = GroupTable.parse(List.of("#version", "produce {\"user\":\"alice\"}",
                group("gold", 1, false, "\"svc-*\"", "etl-",
                        "\"consumer_byte_rate\":2048.0,\"producer_byte_rate\":1024.5,\"request_percentage\":25.0",
                        "\"alice\""),
                "exempt admin@corp", "group {not json", "group {\"name\":\"bad name\"}"));
        assertEquals(1, t.groups().size(), "the malformed and the misnamed group are ignored");
        GroupTable.Group g = t.groups().get(0);
        assertEquals("gold", g.name());
        assertEquals(1, g.order());
        assertEquals(Set.of("alice"), g.users());
        assertEquals("etl-", g.prefix());
        assertEquals(Map.of(ClientQuotaType.PRODUCE, 1024.5, ClientQuotaType.FETCH, 2048.0,
                ClientQuotaType.REQUEST, 25.0), g.quotas());
        assertEquals("group@gold", g.userTag());
        assertEquals("{\"group\":\"gold\"}", g.entity().field());
        assertEquals(g.entity(), EntityKey.fromField("{\"group\":\"gold\"}"));
        assertNull(EntityKey.fromField("{\"group\":\"gold\",\"user\":\"alice\"}"));
        assertTrue(t.exempt("admin@corp"));
        assertFalse(t.exempt("admin"));
        assertTrue(GroupTable.parse(List.of("#version", "produce {\"user\":\"alice\"}")).isEmpty());
    }

    @Test
    void membershipIsUsersOrPatternsOrAnyAndThePrefix() {
        GroupTable.Group byUser = GroupTable.parseGroup(group("g", 0, false, "", null, "", "\"alice\",\"b@b.com\"")
                .substring(6));
        assertTrue(byUser.member("alice", "any-client"));
        assertTrue(byUser.member("b@b.com", ""), "raw principal names, not sanitized ones");
        assertFalse(byUser.member("b%40b.com", ""));
        assertFalse(byUser.member("Alice", "x"), "case-sensitive");

        GroupTable.Group byPattern = GroupTable.parseGroup(group("g", 0, false, "\"svc-*\",\"batch-?\"", null, "", "")
                .substring(6));
        assertTrue(byPattern.member("svc-web", "c"));
        assertTrue(byPattern.member("batch-1", "c"));
        assertFalse(byPattern.member("batch-10", "c"));
        assertFalse(byPattern.member("web-svc", "c"));

        GroupTable.Group prefixed = GroupTable.parseGroup(group("g", 0, false, "\"svc-*\"", "etl-", "", "\"alice\"")
                .substring(6));
        assertTrue(prefixed.member("svc-web", "etl-nightly"));
        assertTrue(prefixed.member("alice", "etl-"));
        assertFalse(prefixed.member("alice", "app"), "the client id must start with the prefix too");
        assertFalse(prefixed.member("bob", "etl-nightly"));

        GroupTable.Group any = GroupTable.parseGroup(group("g", 0, true, "", null, "", "").substring(6));
        assertTrue(any.member("whoever", ""));
        GroupTable.Group anyPrefixed = GroupTable.parseGroup(group("g", 0, true, "", "etl-", "", "").substring(6));
        assertTrue(anyPrefixed.member("whoever", "etl-1"));
        assertFalse(anyPrefixed.member("whoever", "app"));
    }

    @Test
    void theFirstMemberGroupInOrderThenNameWithAValueOfTheTypeAnswers() {
        GroupTable t = GroupTable.parse(List.of(
                group("zeta", 1, true, "", null, "\"producer_byte_rate\":100.0", ""),
                group("alpha", 1, false, "\"svc-*\"", null, "\"producer_byte_rate\":200.0", ""),
                group("first", 0, false, "\"svc-a*\"", null, "\"consumer_byte_rate\":300.0", "")));
        assertEquals(List.of("first", "alpha", "zeta"), t.groups().stream().map(GroupTable.Group::name).toList());
        assertEquals("alpha", t.groupOf(ClientQuotaType.PRODUCE, "svc-a1", "c").name(),
                "first has no produce value: the next member group in (order, name) answers");
        assertEquals("first", t.groupOf(ClientQuotaType.FETCH, "svc-a1", "c").name());
        assertEquals("zeta", t.groupOf(ClientQuotaType.PRODUCE, "web", "c").name());
        assertNull(t.groupOf(ClientQuotaType.FETCH, "web", "c"));
        assertNull(t.groupOf(ClientQuotaType.REQUEST, "svc-a1", "c"));
        assertNull(t.groupOf(ClientQuotaType.CONTROLLER_MUTATION, "svc-a1", "c"), "never controller mutations");
    }

    @Test
    void aChangeNamesTheQuotaTypesWhoseAnswersMayMove() {
        String gold = group("gold", 1, false, "\"svc-*\"", null,
                "\"consumer_byte_rate\":2.0,\"producer_byte_rate\":1.0", "");
        GroupTable before = GroupTable.parse(List.of(gold));
        assertEquals(Set.of(), before.changed(GroupTable.parse(List.of(gold))));
        assertEquals(EnumSet.of(ClientQuotaType.FETCH), before.changed(GroupTable.parse(List.of(group("gold", 1, false,
                "\"svc-*\"", null, "\"consumer_byte_rate\":3.0,\"producer_byte_rate\":1.0", "")))));
        assertEquals(EnumSet.of(ClientQuotaType.PRODUCE, ClientQuotaType.FETCH), before.changed(GroupTable.parse(
                List.of(group("gold", 1, false, "\"svc-*\",\"x\"", null,
                        "\"consumer_byte_rate\":2.0,\"producer_byte_rate\":1.0", "")))), "members changed");
        assertEquals(EnumSet.of(ClientQuotaType.PRODUCE, ClientQuotaType.FETCH), before.changed(GroupTable.EMPTY));
        assertEquals(EnumSet.allOf(ClientQuotaType.class), before.changed(GroupTable.parse(List.of(gold,
                "exempt root"))), "an exempt principal has no quota of any type");
    }
}
