// Run by tests/kafka/test_kip714.py in Java's source-file mode, with Kafka's jars and the plugin on the classpath:
//   java -cp '.run/kafka/lib/*:.run/kafka/plugin/*' tests/kafka/java/ExporterDrops.java <endpoint> <pushes> <capacity>
//        [<hold-ms>]
// Hands <pushes> payloads to a PortalTelemetryExporter as a broker's request thread would, against an endpoint that
// never answers, and prints one JSON line: the exporter's JMX counters and the longest exportMetrics call. With
// <hold-ms>, the JVM (and its MBean) stays up that long after the line, for a JMX exporter agent to be scraped.

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;

import java.lang.management.ManagementFactory;
import java.net.InetAddress;
import java.nio.ByteBuffer;
import java.util.Map;

import javax.management.MBeanServer;
import javax.management.ObjectName;

import quotaportal.kafka.telemetry.PortalTelemetryExporter;

public class ExporterDrops {
    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        int pushes = Integer.parseInt(args[1]);
        PortalTelemetryExporter exporter = new PortalTelemetryExporter();
        exporter.configure(Map.of(
            "portal.telemetry.endpoint", endpoint, "portal.telemetry.queue.capacity", args[2],
            "portal.telemetry.request.timeout.ms", "3000", "portal.telemetry.cluster", "drops", "node.id", "7"));
        AuthorizableRequestContext request = new AuthorizableRequestContext() {
            public String listenerName() { return "PLAINTEXT"; }
            public SecurityProtocol securityProtocol() { return SecurityProtocol.PLAINTEXT; }
            public KafkaPrincipal principal() { return KafkaPrincipal.ANONYMOUS; }
            public InetAddress clientAddress() { return InetAddress.getLoopbackAddress(); }
            public int requestType() { return 72; }
            public int requestVersion() { return 0; }
            public String clientId() { return "drops-app"; }
            public int correlationId() { return 1; }
        };
        ClientTelemetryContext context = new ClientTelemetryContext() {
            public int pushIntervalMs() { return 1000; }
            public AuthorizableRequestContext authorizableRequestContext() { return request; }
        };
        ClientTelemetryExporter target = exporter.clientTelemetryExporter();
        long worstNanos = 0;
        for (int i = 0; i < pushes; i++) {
            Uuid id = Uuid.randomUuid();
            ClientTelemetryPayload payload = new ClientTelemetryPayload() {
                public Uuid clientInstanceId() { return id; }
                public boolean isTerminating() { return false; }
                public String contentType() { return "OTLP"; }
                public ByteBuffer data() { return ByteBuffer.wrap(new byte[2048]); }
            };
            long t0 = System.nanoTime();
            target.exportMetrics(context, payload);
            worstNanos = Math.max(worstNanos, System.nanoTime() - t0);
            Thread.sleep(2);
        }
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        ObjectName name = new ObjectName("kafka.server:type=portal-telemetry-exporter");
        System.out.println(String.format(
            "{\"enqueued\":%d,\"dropped\":%d,\"sent\":%d,\"capacity\":%d,\"worst_export_us\":%d}",
            server.getAttribute(name, "Enqueued"), server.getAttribute(name, "Dropped"),
            server.getAttribute(name, "Sent"), server.getAttribute(name, "QueueCapacity"), worstNanos / 1000));
        System.out.flush();
        if (args.length > 3) {
            Thread.sleep(Long.parseLong(args[3]));
        }
        exporter.close();
    }
}
