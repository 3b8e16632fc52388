package quotaportal.kafka.telemetry;

import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsContext;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.InetAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.zip.GZIPOutputStream;

/**
 * KIP-714 broker plugin of the quota portal: every client telemetry push the broker accepts is forwarded to the
 * portal's OTLP/HTTP receiver ({@code POST /v1/metrics}), with who sent it.
 *
 * <p>Configured on the broker as a metric reporter, next to Kafka's own JmxReporter, which Kafka 4 drops from a
 * list that does not name it ({@code metric.reporters=org.apache.kafka.common.metrics.JmxReporter,quotaportal.kafka.telemetry.PortalTelemetryExporter});
 * Kafka 4.x hands pushes to metric reporters that implement {@link ClientTelemetryExporterProvider}. Broker
 * settings (all optional but the endpoint; without it every push is counted as dropped):
 * <ul>
 *   <li>{@code portal.telemetry.endpoint}: the receiver's URL, e.g. {@code http://127.0.0.1:8000/v1/metrics};</li>
 *   <li>{@code portal.telemetry.cluster}: the portal's name of this cluster (header {@code X-Quotas-Cluster});</li>
 *   <li>{@code portal.telemetry.token}: a bearer token the receiver requires ({@code QUOTAS_OTLP_TOKEN});</li>
 *   <li>{@code portal.telemetry.queue.capacity} (1000 payloads), {@code portal.telemetry.request.timeout.ms}
 *       (5000), {@code portal.telemetry.max.retries} (2, for 429/502/503/504), {@code portal.telemetry.compression}
 *       ({@code none} or {@code gzip}).</li>
 * </ul>
 *
 * <p>The broker's request thread only copies the payload and offers it to a bounded queue; a full queue drops the
 * payload (counted). One daemon thread posts the queue's payloads, one at a time, as OTLP/HTTP protobuf: the body
 * is the client's OTLP {@code MetricsData} as the broker decompressed it (an {@code ExportMetricsServiceRequest}
 * has the same encoding), headers {@code X-Kafka-Client-Instance-Id}, {@code X-Kafka-Client-Id},
 * {@code X-Kafka-Principal}, {@code X-Kafka-Client-Address}, {@code X-Kafka-Listener},
 * {@code X-Kafka-Client-Software-Name}/{@code -Version}, {@code X-Kafka-Push-Interval-Ms},
 * {@code X-Kafka-Terminating}, {@code X-Kafka-Cluster-Id}, {@code X-Kafka-Broker-Id}, {@code X-Quotas-Cluster}
 * (free-text values percent-encoded as UTF-8). Counters are the JMX MBean
 * {@code kafka.server:type=portal-telemetry-exporter} ({@link ExporterStats}).
 */
public final class PortalTelemetryExporter implements MetricsReporter, ClientTelemetryExporterProvider, ClientTelemetryExporter {

    public static final String ENDPOINT_CONFIG = "portal.telemetry.endpoint";
    public static final String CLUSTER_CONFIG = "portal.telemetry.cluster";
    public static final String TOKEN_CONFIG = "portal.telemetry.token";
    public static final String QUEUE_CAPACITY_CONFIG = "portal.telemetry.queue.capacity";
    public static final String TIMEOUT_MS_CONFIG = "portal.telemetry.request.timeout.ms";
    public static final String MAX_RETRIES_CONFIG = "portal.telemetry.max.retries";
    public static final String COMPRESSION_CONFIG = "portal.telemetry.compression";

    static final int DEFAULT_QUEUE_CAPACITY = 1000;
    static final int DEFAULT_TIMEOUT_MS = 5000;
    static final int DEFAULT_MAX_RETRIES = 2;
    /** Longest wait before a retry (a receiver's Retry-After beyond this is cut short). */
    static final long MAX_BACKOFF_MS = 2000;
    /** Pause after a connection failure, so a receiver that is down costs the broker no busy loop. */
    static final long DOWN_PAUSE_MS = 200;

    private static final Logger LOG = LoggerFactory.getLogger(PortalTelemetryExporter.class);

    private volatile URI endpoint;
    private volatile String cluster = "";
    private volatile String token = "";
    private volatile int timeoutMs = DEFAULT_TIMEOUT_MS;
    private volatile int maxRetries = DEFAULT_MAX_RETRIES;
    private volatile boolean gzip;
    private volatile String clusterId = "";
    private volatile String brokerId = "";

    private BlockingQueue<Item> queue = new ArrayBlockingQueue<>(DEFAULT_QUEUE_CAPACITY);
    private final ExporterStats stats = ExporterStats.acquire();
    private final Object lifecycle = new Object();
    private Thread sender;
    private volatile HttpClient http;
    private volatile boolean closed;

    /** One forwarded push: the OTLP bytes and the headers, made on the broker's thread. */
    static final class Item {
        final byte[] body;
        final String[] headers;

        Item(byte[] body, String[] headers) {
            this.body = body;
            this.headers = headers;
        }
    }

    // ---------------------------------------------------------------- MetricsReporter

    @Override
    public void configure(Map<String, ?> configs) {
        Object url = configs.get(ENDPOINT_CONFIG);
        String text = url == null ? "" : url.toString().trim();
        endpoint = text.isEmpty() ? null : URI.create(text);
        cluster = string(configs.get(CLUSTER_CONFIG));
        token = string(configs.get(TOKEN_CONFIG));
        timeoutMs = positive(configs.get(TIMEOUT_MS_CONFIG), DEFAULT_TIMEOUT_MS);
        maxRetries = Math.max(0, integer(configs.get(MAX_RETRIES_CONFIG), DEFAULT_MAX_RETRIES));
        gzip = "gzip".equalsIgnoreCase(string(configs.get(COMPRESSION_CONFIG)));
        int capacity = positive(configs.get(QUEUE_CAPACITY_CONFIG), DEFAULT_QUEUE_CAPACITY);
        if (brokerId.isEmpty()) {
            brokerId = string(configs.containsKey("node.id") ? configs.get("node.id") : configs.get("broker.id"));
        }
        synchronized (lifecycle) {
            if (capacity != queue.remainingCapacity() + queue.size()) {
                queue = new ArrayBlockingQueue<>(capacity);
            }
        }
        stats.configure(endpoint == null ? "" : endpoint.toString(), capacity);
        LOG.info("Portal telemetry exporter: endpoint {}, cluster '{}', queue {}, timeout {} ms, compression {}",
            endpoint == null ? "(none: pushes are dropped)" : endpoint, cluster, capacity, timeoutMs, gzip ? "gzip" : "none");
    }

    @Override
    public void contextChange(MetricsContext metricsContext) {
        Map<String, String> labels = metricsContext.contextLabels();
        clusterId = string(labels.get("kafka.cluster.id"));
        String id = labels.containsKey("kafka.node.id") ? labels.get("kafka.node.id") : labels.get("kafka.broker.id");
        if (id != null && !id.isEmpty()) {
            brokerId = id;
        }
    }

    @Override
    public void init(List<KafkaMetric> metrics) {
        // the sender thread starts with the first push: a controller-only reporter never starts one
    }

    @Override
    public void metricChange(KafkaMetric metric) {
    }

    @Override
    public void metricRemoval(KafkaMetric metric) {
    }

    @Override
    public void close() {
        Thread thread;
        synchronized (lifecycle) {
            if (closed) {
                return;
            }
            closed = true;
            thread = sender;
            sender = null;
        }
        if (thread != null) {
            thread.interrupt();
            try {
                thread.join(TimeUnit.SECONDS.toMillis(2));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        stats.queueDepth(0);
        stats.release();
    }

    // ---------------------------------------------------------------- ClientTelemetryExporterProvider

    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return this;
    }

    /** Called on the broker's request handler thread: never blocks, never throws. */
    @Override
    public void exportMetrics(ClientTelemetryContext context, ClientTelemetryPayload payload) {
        try {
            if (closed || endpoint == null) {
                stats.dropped();
                return;
            }
            if (payload.contentType() != null && !"OTLP".equalsIgnoreCase(payload.contentType())) {
                stats.unsupported();
                return;
            }
            Item item = new Item(bytes(payload.data()), headers(context, payload));
            BlockingQueue<Item> q = queue;
            if (q.offer(item)) {
                stats.enqueued(q.size());
                ensureSender();
            } else {
                stats.dropped();
            }
        } catch (Throwable t) { // the broker would fail the client's push: count it instead
            stats.failed("export: " + t);
        }
    }

    static byte[] bytes(ByteBuffer data) {
        if (data == null) {
            return new byte[0];
        }
        ByteBuffer view = data.duplicate();
        byte[] out = new byte[view.remaining()];
        view.get(out);
        return out;
    }

    String[] headers(ClientTelemetryContext context, ClientTelemetryPayload payload) {
        AuthorizableRequestContext request = context.authorizableRequestContext();
        KafkaPrincipal principal = request == null ? null : request.principal();
        InetAddress address = request == null ? null : request.clientAddress();
        String[] software = software(request);
        return new String[] {
            "Content-Type", "application/x-protobuf",
            "X-Kafka-Client-Instance-Id", payload.clientInstanceId() == null ? "" : payload.clientInstanceId().toString(),
            "X-Kafka-Client-Id", encode(request == null ? null : request.clientId()),
            "X-Kafka-Principal", encode(principal == null ? null : principal.toString()),
            "X-Kafka-Client-Address", address == null ? "" : address.getHostAddress(),
            "X-Kafka-Listener", encode(request == null ? null : request.listenerName()),
            "X-Kafka-Client-Software-Name", encode(software[0]),
            "X-Kafka-Client-Software-Version", encode(software[1]),
            "X-Kafka-Push-Interval-Ms", Integer.toString(context.pushIntervalMs()),
            "X-Kafka-Terminating", Boolean.toString(payload.isTerminating()),
            "X-Kafka-Content-Type", encode(payload.contentType()),
            "X-Kafka-Cluster-Id", encode(clusterId),
            "X-Kafka-Broker-Id", encode(brokerId),
            "X-Quotas-Cluster", encode(cluster),
        };
    }

    /** The client's software name and version: only Kafka's own RequestContext knows them (not the public API). */
    static String[] software(AuthorizableRequestContext request) {
        try {
            if (request instanceof org.apache.kafka.common.requests.RequestContext) {
                var info = ((org.apache.kafka.common.requests.RequestContext) request).clientInformation;
                if (info != null) {
                    return new String[] {info.softwareName(), info.softwareVersion()};
                }
            }
        } catch (LinkageError e) { // another Kafka whose RequestContext differs: go without
        }
        return new String[] {null, null};
    }

    /** Percent-encoding of UTF-8, keeping RFC 3986's unreserved characters and a few harmless ones. */
    static String encode(String value) {
        if (value == null) {
            return "";
        }
        StringBuilder out = new StringBuilder(value.length());
        for (byte b : value.getBytes(StandardCharsets.UTF_8)) {
            int c = b & 0xff;
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                || c == '-' || c == '.' || c == '_' || c == '~' || c == ':' || c == '@' || c == '/') {
                out.append((char) c);
            } else {
                out.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
                    .append(Character.toUpperCase(Character.forDigit(c & 0xf, 16)));
            }
        }
        return out.toString();
    }

    // ---------------------------------------------------------------- the sender

    private void ensureSender() {
        if (sender != null) {
            return;
        }
        synchronized (lifecycle) {
            if (sender != null || closed) {
                return;
            }
            Thread thread = new Thread(this::run, "portal-telemetry-exporter");
            thread.setDaemon(true);
            sender = thread;
            thread.start();
        }
    }

    private void run() {
        // built here, not on the broker's request thread: the first HttpClient of a JVM takes a while (TLS setup)
        http = HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1) // plain http: no h2c upgrade dance with the receiver
            .connectTimeout(Duration.ofMillis(Math.min(timeoutMs, 2000)))
            .build();
        while (!closed) {
            Item item;
            try {
                item = queue.poll(1, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                break;
            }
            stats.queueDepth(queue.size());
            if (item != null) {
                try {
                    send(item);
                } catch (InterruptedException e) {
                    break;
                } catch (RuntimeException e) {
                    stats.failed("send: " + e);
                }
            }
        }
    }

    private void send(Item item) throws InterruptedException {
        byte[] body = item.body;
        boolean gzipped = false;
        if (gzip) {
            body = gzip(body);
            gzipped = true;
        }
        HttpRequest.Builder builder = HttpRequest.newBuilder(endpoint)
            .timeout(Duration.ofMillis(timeoutMs))
            .POST(HttpRequest.BodyPublishers.ofByteArray(body));
        for (int i = 0; i < item.headers.length; i += 2) {
            if (!item.headers[i + 1].isEmpty()) {
                builder.header(item.headers[i], item.headers[i + 1]);
            }
        }
        if (gzipped) {
            builder.header("Content-Encoding", "gzip");
        }
        if (!token.isEmpty()) {
            builder.header("Authorization", "Bearer " + token);
        }
        HttpRequest request = builder.build();
        for (int attempt = 0; ; attempt++) {
            HttpResponse<byte[]> response;
            try {
                response = http.send(request, HttpResponse.BodyHandlers.ofByteArray());
            } catch (IOException e) {
                stats.failed("POST " + endpoint + ": " + e);
                Thread.sleep(DOWN_PAUSE_MS);
                return;
            }
            int status = response.statusCode();
            stats.status(status);
            if (status >= 200 && status < 300) {
                stats.sent(item.body.length);
                return;
            }
            boolean retryable = status == 429 || status == 502 || status == 503 || status == 504;
            if (!retryable || attempt >= maxRetries) {
                stats.rejected("HTTP " + status + ": " + snippet(response.body()));
                return;
            }
            stats.retried();
            Thread.sleep(backoffMs(response, attempt));
        }
    }

    static long backoffMs(HttpResponse<?> response, int attempt) {
        long wait = 100L << Math.min(attempt, 4);
        String retryAfter = response.headers().firstValue("Retry-After").orElse("");
        try {
            wait = Math.max(wait, Long.parseLong(retryAfter.trim()) * 1000);
        } catch (NumberFormatException e) { // an HTTP date or nothing: the exponential backoff
        }
        return Math.min(wait, MAX_BACKOFF_MS);
    }

    static byte[] gzip(byte[] data) {
        ByteArrayOutputStream out = new ByteArrayOutputStream(Math.max(64, data.length / 2));
        try (GZIPOutputStream zip = new GZIPOutputStream(out)) {
            zip.write(data);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        return out.toByteArray();
    }

    static String snippet(byte[] body) {
        String text = body == null ? "" : new String(body, StandardCharsets.UTF_8);
        return text.length() > 200 ? text.substring(0, 200) : text;
    }

    static String string(Object value) {
        return value == null ? "" : value.toString().trim();
    }

    static int integer(Object value, int otherwise) {
        try {
            return value == null ? otherwise : Integer.parseInt(value.toString().trim());
        } catch (NumberFormatException e) {
            return otherwise;
        }
    }

    static int positive(Object value, int otherwise) {
        int n = integer(value, otherwise);
        return n > 0 ? n : otherwise;
    }

    @Override
    public String toString() {
        return String.format(Locale.ROOT, "PortalTelemetryExporter(%s)", endpoint);
    }
}
