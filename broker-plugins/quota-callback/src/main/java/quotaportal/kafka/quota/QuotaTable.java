package quotaportal.kafka.quota;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.kafka.common.utils.internals.Sanitizer;
import org.apache.kafka.server.quota.ClientQuotaEntity;

/**
 * The quota values Kafka configured for one quota type, and Kafka's own answers from them: what its default callback
 * (inside {@code ClientQuotaManager}, one per quota type) answers for the metric tags of a client and for the limit
 * of a sensor, with the 8-level precedence
 *
 * <pre>
 *   /config/users/&lt;user&gt;/clients/&lt;client-id&gt;     /config/users/&lt;default&gt;/clients/&lt;client-id&gt;
 *   /config/users/&lt;user&gt;/clients/&lt;default&gt;       /config/users/&lt;default&gt;/clients/&lt;default&gt;
 *   /config/users/&lt;user&gt;                         /config/users/&lt;default&gt;
 *                                                 /config/clients/&lt;client-id&gt;, /config/clients/&lt;default&gt;
 * </pre>
 *
 * and the same shortcut Kafka takes while quotas exist at one level only (the metric tags then follow that level,
 * whether or not the client's own entity has a value: Kafka's {@code quotaTypesEnabled}). Reads are lock-free (a
 * {@link ConcurrentHashMap} and a volatile); updates come from Kafka's quota managers, rarely.
 */
final class QuotaTable {
    static final String USER_TAG = "user";
    static final String CLIENT_ID_TAG = "client-id";
    static final String DEFAULT_NAME = "<default>";
    /** The key of a quota group's entity field: {@code {"group":"<name>"}}. */
    static final String GROUP_KEY = "group";

    // Kafka's quotaTypesEnabled bits: which levels have at least one value
    static final int NO_QUOTAS = 0;
    static final int CLIENT_ID_QUOTA_ENABLED = 1;
    static final int USER_QUOTA_ENABLED = 2;
    static final int USER_CLIENT_ID_QUOTA_ENABLED = 4;

    /**
     * One config entity of Kafka's quota configs: a user level (a sanitized user name, or the default) and/or a
     * client-id level (a client id, or the default); {@code null} name and no default = the level is absent. Or,
     * with {@code group} set (and no level), one of the portal's quota groups ({@link GroupTable}), whose values
     * live in the scope, not in Kafka's configs.
     */
    record EntityKey(String user, boolean defaultUser, String clientId, boolean defaultClient, String group) {
        static final EntityKey DEFAULT_USER = new EntityKey(null, true, null, false);
        static final EntityKey DEFAULT_CLIENT = new EntityKey(null, false, null, true);
        static final EntityKey DEFAULT_USER_DEFAULT_CLIENT = new EntityKey(null, true, null, true);

        EntityKey(String user, boolean defaultUser, String clientId, boolean defaultClient) {
            this(user, defaultUser, clientId, defaultClient, null);
        }

        static EntityKey group(String name) {
            return new EntityKey(null, false, null, false, name);
        }

        static EntityKey user(String sanitizedUser) {
            return new EntityKey(sanitizedUser, false, null, false);
        }

        static EntityKey client(String clientId) {
            return new EntityKey(null, false, clientId, false);
        }

        static EntityKey userClient(String sanitizedUser, String clientId) {
            return new EntityKey(sanitizedUser, false, clientId, false);
        }

        /** Kafka's entity as its quota managers hand it to a callback (user names desanitized by name()). */
        static EntityKey of(ClientQuotaEntity entity) {
            String user = null;
            boolean defaultUser = false;
            String client = null;
            boolean defaultClient = false;
            for (ClientQuotaEntity.ConfigEntity e : entity.configEntities()) {
                switch (e.entityType()) {
                    case USER -> user = Sanitizer.sanitize(e.name());
                    case DEFAULT_USER -> defaultUser = true;
                    case CLIENT_ID -> client = e.name();
                    case DEFAULT_CLIENT_ID -> defaultClient = true;
                    default -> throw new IllegalArgumentException("not a client quota entity: " + entity);
                }
            }
            return new EntityKey(user, defaultUser, client, defaultClient);
        }

        boolean hasUser() {
            return defaultUser || user != null;
        }

        boolean hasClient() {
            return defaultClient || clientId != null;
        }

        int level() {
            if (hasUser() && hasClient()) {
                return USER_CLIENT_ID_QUOTA_ENABLED;
            }
            return hasUser() ? USER_QUOTA_ENABLED : hasClient() ? CLIENT_ID_QUOTA_ENABLED : NO_QUOTAS;
        }

        /**
         * The engine's name of this entity (its {@code EntityRef.field()}): compact JSON, sorted keys, names raw
         * (the user desanitized), {@code <default>} for a default.
         */
        String field() {
            if (group != null) {
                return Json.object(Map.of(GROUP_KEY, group));
            }
            Map<String, String> out = new TreeMap<>();
            if (hasUser()) {
                out.put(USER_TAG, defaultUser ? DEFAULT_NAME : Sanitizer.desanitize(user));
            }
            if (hasClient()) {
                out.put(CLIENT_ID_TAG, defaultClient ? DEFAULT_NAME : clientId);
            }
            return Json.object(out);
        }

        /** The entity of an engine field ({@link #field()}), or null when it names no client quota entity. */
        static EntityKey fromField(String field) {
            Map<String, String> parts = Json.parseFlatObject(field);
            if (parts == null || parts.isEmpty()) {
                return null;
            }
            if (parts.containsKey(GROUP_KEY)) {
                String name = parts.get(GROUP_KEY);
                return parts.size() == 1 && name != null ? group(name) : null;
            }
            String user = null;
            boolean defaultUser = false;
            String client = null;
            boolean defaultClient = false;
            for (Map.Entry<String, String> e : parts.entrySet()) {
                String value = e.getValue();
                if (value == null) {
                    return null;
                }
                switch (e.getKey()) {
                    case USER_TAG -> {
                        if (DEFAULT_NAME.equals(value)) {
                            defaultUser = true;
                        } else {
                            user = Sanitizer.sanitize(value);
                        }
                    }
                    case CLIENT_ID_TAG -> {
                        if (DEFAULT_NAME.equals(value)) {
                            defaultClient = true;
                        } else {
                            client = value;
                        }
                    }
                    default -> {
                        return null; // an ip entity, or something newer: not a client quota
                    }
                }
            }
            return new EntityKey(user, defaultUser, client, defaultClient);
        }

        @Override
        public String toString() {
            return field();
        }
    }

    /** The value a sensor's tags resolve to, and the config entity that holds it. */
    record Resolved(EntityKey entity, double bound) {
    }

    private final ConcurrentHashMap<EntityKey, Double> quotas = new ConcurrentHashMap<>();
    private final int[] entitiesPerLevel = new int[USER_CLIENT_ID_QUOTA_ENABLED + 1];
    private volatile int quotaTypesEnabled = NO_QUOTAS;

    /** A value set (or changed) for an entity. */
    synchronized void update(EntityKey entity, double value) {
        if (quotas.put(entity, value) == null) {
            entitiesPerLevel[entity.level()]++;
            quotaTypesEnabled |= entity.level();
        }
    }

    /** A value removed. */
    synchronized void remove(EntityKey entity) {
        if (quotas.remove(entity) != null) {
            int level = entity.level();
            if (--entitiesPerLevel[level] <= 0) {
                entitiesPerLevel[level] = 0;
                quotaTypesEnabled &= ~level;
            }
        }
    }

    int quotaTypesEnabled() {
        return quotaTypesEnabled;
    }

    Map<EntityKey, Double> values() {
        return Map.copyOf(quotas);
    }

    /** Kafka's metric tags for a client: {@code user} (sanitized) and {@code client-id}, "" for a level left out. */
    Map<String, String> metricTags(String sanitizedUser, String clientId) {
        String userTag;
        String clientIdTag;
        switch (quotaTypesEnabled) {
            case NO_QUOTAS, CLIENT_ID_QUOTA_ENABLED -> {
                userTag = "";
                clientIdTag = clientId;
            }
            case USER_QUOTA_ENABLED -> {
                userTag = sanitizedUser;
                clientIdTag = "";
            }
            case USER_CLIENT_ID_QUOTA_ENABLED -> {
                userTag = sanitizedUser;
                clientIdTag = clientId;
            }
            default -> {
                // quotas at several levels: the sensor follows the most specific level that has a value
                if (quotas.containsKey(EntityKey.userClient(sanitizedUser, clientId))
                        || quotas.containsKey(new EntityKey(sanitizedUser, false, null, true))) {
                    userTag = sanitizedUser;
                    clientIdTag = clientId;
                } else if (quotas.containsKey(EntityKey.user(sanitizedUser))) {
                    userTag = sanitizedUser;
                    clientIdTag = "";
                } else if (quotas.containsKey(new EntityKey(null, true, clientId, false))
                        || quotas.containsKey(EntityKey.DEFAULT_USER_DEFAULT_CLIENT)) {
                    userTag = sanitizedUser;
                    clientIdTag = clientId;
                } else if (quotas.containsKey(EntityKey.DEFAULT_USER)) {
                    userTag = sanitizedUser;
                    clientIdTag = "";
                } else {
                    userTag = "";
                    clientIdTag = clientId;
                }
            }
        }
        Map<String, String> tags = new LinkedHashMap<>(4);
        tags.put(USER_TAG, userTag);
        tags.put(CLIENT_ID_TAG, clientIdTag);
        return tags;
    }

    /**
     * Whether the value Kafka's precedence picks for the client names it: (user, client-id), (user, default client),
     * (user), (default user, client-id) or (client-id), not a default. Such a value keeps Kafka's answer over a
     * group's; a group wins over the defaults, also over a default that shadows a client-id's own value.
     */
    boolean namesClient(String sanitizedUser, String clientId) {
        if (quotaTypesEnabled == NO_QUOTAS) {
            return false;
        }
        // Kafka's precedence, levels 1 to 8: the first that holds a value decides, and it names the client unless it
        // is one of the defaults (5, 6 and 8)
        EntityKey[] levels = {
            EntityKey.userClient(sanitizedUser, clientId), new EntityKey(sanitizedUser, false, null, true),
            EntityKey.user(sanitizedUser), new EntityKey(null, true, clientId, false),
            EntityKey.DEFAULT_USER_DEFAULT_CLIENT, EntityKey.DEFAULT_USER, EntityKey.client(clientId),
            EntityKey.DEFAULT_CLIENT,
        };
        for (int i = 0; i < levels.length; i++) {
            if (quotas.containsKey(levels[i])) {
                return i != 4 && i != 5 && i != 7;
            }
        }
        return false;
    }

    /** The value and entity a sensor's tags resolve to (Kafka's quotaLimit), or null when none applies. */
    Resolved resolve(Map<String, String> metricTags) {
        return resolve(metricTags.get(USER_TAG), metricTags.get(CLIENT_ID_TAG));
    }

    /** {@link #resolve(Map)} of the tags {@code user} and {@code client-id}. */
    Resolved resolve(String user, String clientId) {
        if (user == null || clientId == null) {
            return null;
        }
        if (!user.isEmpty() && !clientId.isEmpty()) {
            return first(EntityKey.userClient(user, clientId), new EntityKey(user, false, null, true),
                    new EntityKey(null, true, clientId, false), EntityKey.DEFAULT_USER_DEFAULT_CLIENT);
        }
        if (!user.isEmpty()) {
            return first(EntityKey.user(user), EntityKey.DEFAULT_USER);
        }
        if (!clientId.isEmpty()) {
            return first(EntityKey.client(clientId), EntityKey.DEFAULT_CLIENT);
        }
        return null;
    }

    /** Kafka's quotaLimit: the bound of the resolving value, null when none applies (no quota). */
    Double limit(Map<String, String> metricTags) {
        Resolved r = resolve(metricTags);
        return r == null ? null : r.bound();
    }

    private Resolved first(EntityKey... candidates) {
        for (EntityKey key : candidates) {
            Double value = quotas.get(key);
            if (value != null) {
                return new Resolved(key, value);
            }
        }
        return null;
    }
}
