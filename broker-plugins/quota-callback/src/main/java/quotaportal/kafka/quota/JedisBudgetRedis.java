package quotaportal.kafka.quota;

import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.RedisProtocol;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.exceptions.JedisNoScriptException;
import redis.clients.jedis.util.JedisURIHelper;

/**
 * {@link BudgetRedis} over one Jedis connection (shaded into the jar), used by the background thread alone: EVALSHA of
 * the script, loaded again on NOSCRIPT (a restarted or flushed Redis); HGET and HKEYS of the scope hash for a
 * controller. The connection's connect and read timeouts are
 * {@code quota.budget.redis.timeout.ms}, so a slow Redis fails the round instead of holding the thread. Any failure
 * but a script error drops the connection; the next round connects again.
 */
final class JedisBudgetRedis implements BudgetRedis {
    /** Where the build puts the engine's script (engine/lua/budget_share.lua) in the jar. */
    static final String SCRIPT_RESOURCE = "/quotaportal/kafka/quota/budget_share.lua";

    private final URI uri;
    private final int timeoutMs;
    private final String script;
    private final String sha;
    private Jedis jedis;

    JedisBudgetRedis(String url, int timeoutMs) {
        this(url, timeoutMs, loadScript());
    }

    JedisBudgetRedis(String url, int timeoutMs, String script) {
        this.uri = URI.create(url);
        if (!JedisURIHelper.isValid(uri)) {
            throw new IllegalArgumentException("not a Redis URL: " + redacted(url));
        }
        this.timeoutMs = timeoutMs;
        this.script = script;
        this.sha = sha1(script);
    }

    /** The script's SHA-1 as Redis names it (EVALSHA), lower-case hex. */
    static String sha1(String script) {
        try {
            byte[] digest = MessageDigest.getInstance("SHA-1").digest(script.getBytes(StandardCharsets.UTF_8));
            StringBuilder hex = new StringBuilder(40);
            for (byte b : digest) {
                hex.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
            }
            return hex.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The script as the jar holds it. */
    static String loadScript() {
        try (InputStream in = JedisBudgetRedis.class.getResourceAsStream(SCRIPT_RESOURCE)) {
            if (in == null) {
                throw new IllegalStateException(SCRIPT_RESOURCE + " is not in the plugin's jar (a broken build)");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new IllegalStateException("reading " + SCRIPT_RESOURCE, e);
        }
    }

    /** The URL without its password, for logs. */
    static String redacted(String url) {
        return url.replaceAll("//[^/@]*@", "//***@");
    }

    @Override
    public Reply round(List<String> keys, List<String> args) {
        try {
            Jedis conn = connection();
            Object raw;
            try {
                raw = conn.evalsha(sha, keys, args);
            } catch (JedisNoScriptException e) {
                conn.scriptLoad(script); // a new or flushed Redis: load it again, same SHA
                raw = conn.evalsha(sha, keys, args);
            }
            return Reply.parse(raw);
        } catch (JedisDataException e) {
            throw e; // the script or Redis refused: the connection itself is fine
        } catch (RuntimeException e) {
            drop();
            throw e;
        }
    }

    @Override
    public Scope scope(String key, String knownVersion) {
        try {
            Jedis conn = connection();
            String version = conn.hget(key, "#version");
            version = version == null ? "" : version;
            if (version.equals(knownVersion)) {
                return null;
            }
            // a change between the two reads is seen by the next read: its version differs again
            List<String> fields = new ArrayList<>(conn.hkeys(key));
            fields.remove("#version");
            Collections.sort(fields);
            return new Scope(version, List.copyOf(fields));
        } catch (JedisDataException e) {
            throw e;
        } catch (RuntimeException e) {
            drop();
            throw e;
        }
    }

    private Jedis connection() {
        if (jedis == null) {
            DefaultJedisClientConfig.Builder config = DefaultJedisClientConfig.builder()
                    .connectionTimeoutMillis(timeoutMs)
                    .socketTimeoutMillis(timeoutMs)
                    .protocol(RedisProtocol.RESP2)
                    .clientName("portal-quota-callback")
                    .ssl("rediss".equals(uri.getScheme()));
            String user = JedisURIHelper.getUser(uri);
            String password = JedisURIHelper.getPassword(uri);
            if (password != null) {
                config.user(user).password(password);
            }
            if (JedisURIHelper.hasDbIndex(uri)) {
                config.database(JedisURIHelper.getDBIndex(uri));
            }
            HostAndPort address = JedisURIHelper.getHostAndPort(uri);
            jedis = new Jedis(address, config.build());
            jedis.connect();
        }
        return jedis;
    }

    private void drop() {
        Jedis conn = jedis;
        jedis = null;
        if (conn != null) {
            try {
                conn.close();
            } catch (RuntimeException ignored) {
                // already broken
            }
        }
    }

    @Override
    public void close() {
        drop();
    }
}
