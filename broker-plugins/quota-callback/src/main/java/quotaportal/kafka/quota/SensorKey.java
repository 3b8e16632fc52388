package quotaportal.kafka.quota;

import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

import org.apache.kafka.server.quota.ClientQuotaType;

/**
 * One of Kafka's quota sensors: its quota type and the metric tags the callback gave it ({@code user}, sanitized, and
 * {@code client-id}; "" where the level is left out).
 */
record SensorKey(ClientQuotaType type, String user, String clientId) {

    static SensorKey of(ClientQuotaType type, Map<String, String> tags) {
        return new SensorKey(type, tags.getOrDefault(QuotaTable.USER_TAG, ""),
                tags.getOrDefault(QuotaTable.CLIENT_ID_TAG, ""));
    }

    /** The protocol's name of a quota type: produce, fetch, request (controller_mutation is never a budget). */
    static String protocolName(ClientQuotaType type) {
        return type.name().toLowerCase(Locale.ROOT);
    }

    /** Kafka's group name of the type's sensors (its QuotaType): Produce, Fetch, Request, ControllerMutation. */
    static String kafkaGroup(ClientQuotaType type) {
        return switch (type) {
            case PRODUCE -> "Produce";
            case FETCH -> "Fetch";
            case REQUEST -> "Request";
            case CONTROLLER_MUTATION -> "ControllerMutation";
        };
    }

    /** Whether a quota of this type can be a cluster-wide budget. */
    static boolean budgetable(ClientQuotaType type) {
        return type == ClientQuotaType.PRODUCE || type == ClientQuotaType.FETCH || type == ClientQuotaType.REQUEST;
    }

    /** The protocol's sensor tags field: {@code {"client-id":"<c>","user":"<u>"}} (compact, sorted keys). */
    String tagsField() {
        Map<String, String> tags = new LinkedHashMap<>();
        tags.put(QuotaTable.CLIENT_ID_TAG, clientId);
        tags.put(QuotaTable.USER_TAG, user);
        return Json.object(tags);
    }

    /** The protocol's budget id: {@code <quota type> <sensor tags field>}. */
    String budgetId() {
        return protocolName(type) + " " + tagsField();
    }
}
