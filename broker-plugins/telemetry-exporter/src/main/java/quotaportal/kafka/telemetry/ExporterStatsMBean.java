package quotaportal.kafka.telemetry;

/**
 * The exporter's counters over JMX: {@code kafka.server:type=portal-telemetry-exporter} (one per broker JVM;
 * the Prometheus JMX exporter and any JMX client read them as attributes).
 */
public interface ExporterStatsMBean {
    /** Payloads the broker handed over and the queue took. */
    long getEnqueued();

    /** Payloads posted and answered 2xx. */
    long getSent();

    /** Bytes of OTLP (before any gzip) in the payloads sent. */
    long getSentBytes();

    /** Payloads not queued: the queue was full, or no endpoint is configured. */
    long getDropped();

    /** Posts that failed (connection refused, timeout, ...) or export errors: the payload is lost. */
    long getFailed();

    /** Posts the receiver refused (non-2xx after the retries): the payload is lost. */
    long getRejected();

    /** Retries of a post answered 429/502/503/504. */
    long getRetried();

    /** Payloads of a content type other than OTLP (not forwarded). */
    long getUnsupported();

    /** Payloads waiting in the queue now. */
    int getQueueDepth();

    int getQueueCapacity();

    /** HTTP status of the last answer (0 before the first). */
    int getLastStatus();

    String getLastError();

    String getEndpoint();
}
