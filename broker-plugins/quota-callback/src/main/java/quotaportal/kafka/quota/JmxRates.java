package quotaportal.kafka.quota;

import java.lang.management.ManagementFactory;
import java.util.concurrent.ConcurrentHashMap;

import javax.management.InstanceNotFoundException;
import javax.management.JMException;
import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.apache.kafka.common.utils.internals.Sanitizer;
import org.apache.kafka.server.quota.ClientQuotaType;

/**
 * The rates Kafka measures for its quota sensors, read in-process from the platform MBeanServer where Kafka's
 * JmxReporter puts them: {@code kafka.server:type=Produce|Fetch|Request,user=<tag>,client-id=<tag>} (a tag left out
 * when empty; values quoted as JmxReporter quotes them), attribute {@code byte-rate} (Produce, Fetch: bytes/s) or
 * {@code request-time} (Request: % of a thread).
 */
final class JmxRates implements BudgetCoordinator.RateSource {
    private final MBeanServer server;
    private final ConcurrentHashMap<SensorKey, ObjectName> names = new ConcurrentHashMap<>();

    JmxRates() {
        this(ManagementFactory.getPlatformMBeanServer());
    }

    JmxRates(MBeanServer server) {
        this.server = server;
    }

    /** The name Kafka's JmxReporter gives a quota sensor's metrics. */
    static ObjectName sensorName(SensorKey sensor) {
        return quotaName("kafka.server:type=" + SensorKey.kafkaGroup(sensor.type()), sensor);
    }

    /** {@code prefix} with the sensor's tags as Kafka's quota MBeans carry them (a tag left out when empty). */
    static ObjectName quotaName(String prefix, SensorKey sensor) {
        StringBuilder name = new StringBuilder(prefix);
        if (!sensor.user().isEmpty()) {
            name.append(",user=").append(Sanitizer.jmxSanitize(sensor.user()));
        }
        if (!sensor.clientId().isEmpty()) {
            name.append(",client-id=").append(Sanitizer.jmxSanitize(sensor.clientId()));
        }
        try {
            return new ObjectName(name.toString());
        } catch (JMException e) {
            throw new IllegalArgumentException(name.toString(), e);
        }
    }

    /** The attribute of the sensor's measured rate. */
    static String rateAttribute(ClientQuotaType type) {
        return switch (type) {
            case REQUEST -> "request-time";
            case CONTROLLER_MUTATION -> "mutation-rate";
            default -> "byte-rate";
        };
    }

    private ObjectName name(SensorKey sensor) {
        return names.computeIfAbsent(sensor, JmxRates::sensorName);
    }

    /** Whether Kafka still has the sensor (it expires sensors idle for an hour). */
    boolean exists(SensorKey sensor) {
        return server.isRegistered(name(sensor));
    }

    void forget(SensorKey sensor) {
        names.remove(sensor);
    }

    /** Kafka's {@code throttle-time} of the sensor: the mean throttle it gave within its window (none: NaN, 0). */
    @Override
    public double throttleMs(SensorKey sensor) {
        try {
            Object value = server.getAttribute(name(sensor), "throttle-time");
            double ms = value instanceof Number n ? n.doubleValue() : 0;
            return ms > 0 ? ms : 0;
        } catch (JMException | RuntimeException e) {
            return 0;
        }
    }

    @Override
    public double rate(SensorKey sensor) {
        try {
            Object value = server.getAttribute(name(sensor), rateAttribute(sensor.type()));
            return value instanceof Number n ? n.doubleValue() : Double.NaN;
        } catch (InstanceNotFoundException e) {
            return Double.NaN;
        } catch (JMException | RuntimeException e) {
            return Double.NaN;
        }
    }
}
