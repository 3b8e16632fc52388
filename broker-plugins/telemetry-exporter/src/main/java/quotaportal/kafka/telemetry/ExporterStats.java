package quotaportal.kafka.telemetry;

import java.lang.management.ManagementFactory;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import javax.management.JMException;
import javax.management.MBeanServer;
import javax.management.ObjectName;

/**
 * The counters of every {@link PortalTelemetryExporter} of this JVM (a combined broker and controller creates more
 * than one reporter; only the broker's gets pushes), registered as the MBean {@link #MBEAN_NAME} while at least
 * one exporter is open.
 */
public final class ExporterStats implements ExporterStatsMBean {

    public static final String MBEAN_NAME = "kafka.server:type=portal-telemetry-exporter";

    private static ExporterStats instance;
    private static int users;

    private final AtomicLong enqueued = new AtomicLong();
    private final AtomicLong sent = new AtomicLong();
    private final AtomicLong sentBytes = new AtomicLong();
    private final AtomicLong dropped = new AtomicLong();
    private final AtomicLong failed = new AtomicLong();
    private final AtomicLong rejected = new AtomicLong();
    private final AtomicLong retried = new AtomicLong();
    private final AtomicLong unsupported = new AtomicLong();
    private final AtomicInteger queueDepth = new AtomicInteger();
    private final AtomicInteger lastStatus = new AtomicInteger();
    private volatile int queueCapacity;
    private volatile String lastError = "";
    private volatile String endpoint = "";

    private ExporterStats() {
    }

    /** The JVM's stats, registered over JMX by the first user. */
    static synchronized ExporterStats acquire() {
        if (instance == null) {
            instance = new ExporterStats();
        }
        if (users++ == 0) {
            register(instance);
        }
        return instance;
    }

    synchronized void release() {
        synchronized (ExporterStats.class) {
            if (users > 0 && --users == 0) {
                try {
                    ManagementFactory.getPlatformMBeanServer().unregisterMBean(new ObjectName(MBEAN_NAME));
                } catch (JMException | RuntimeException e) { // already gone
                }
            }
        }
    }

    private static void register(ExporterStats stats) {
        try {
            MBeanServer server = ManagementFactory.getPlatformMBeanServer();
            ObjectName name = new ObjectName(MBEAN_NAME);
            if (server.isRegistered(name)) {
                server.unregisterMBean(name);
            }
            server.registerMBean(stats, name);
        } catch (JMException | RuntimeException e) {
            stats.lastError = "JMX registration failed: " + e;
        }
    }

    void configure(String endpoint, int capacity) {
        if (!endpoint.isEmpty() || this.endpoint.isEmpty()) {
            this.endpoint = endpoint;
        }
        this.queueCapacity = Math.max(this.queueCapacity, capacity);
    }

    void enqueued(int depth) {
        enqueued.incrementAndGet();
        queueDepth.set(depth);
    }

    void queueDepth(int depth) {
        queueDepth.set(depth);
    }

    void sent(int bytes) {
        sent.incrementAndGet();
        sentBytes.addAndGet(bytes);
    }

    void dropped() {
        dropped.incrementAndGet();
    }

    void failed(String why) {
        failed.incrementAndGet();
        lastError = why;
    }

    void rejected(String why) {
        rejected.incrementAndGet();
        lastError = why;
    }

    void retried() {
        retried.incrementAndGet();
    }

    void unsupported() {
        unsupported.incrementAndGet();
    }

    void status(int status) {
        lastStatus.set(status);
    }

    @Override
    public long getEnqueued() {
        return enqueued.get();
    }

    @Override
    public long getSent() {
        return sent.get();
    }

    @Override
    public long getSentBytes() {
        return sentBytes.get();
    }

    @Override
    public long getDropped() {
        return dropped.get();
    }

    @Override
    public long getFailed() {
        return failed.get();
    }

    @Override
    public long getRejected() {
        return rejected.get();
    }

    @Override
    public long getRetried() {
        return retried.get();
    }

    @Override
    public long getUnsupported() {
        return unsupported.get();
    }

    @Override
    public int getQueueDepth() {
        return queueDepth.get();
    }

    @Override
    public int getQueueCapacity() {
        return queueCapacity;
    }

    @Override
    public int getLastStatus() {
        return lastStatus.get();
    }

    @Override
    public String getLastError() {
        return lastError;
    }

    @Override
    public String getEndpoint() {
        return endpoint;
    }
}
