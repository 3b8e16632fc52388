package quotaportal.kafka.telemetry;

import com.sun.tools.attach.VirtualMachine;

import java.util.Locale;

import javax.management.MBeanAttributeInfo;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * Prints the exporter's counters of a running broker as one JSON object, read over JMX:
 * {@code java -cp portal-telemetry-exporter.jar quotaportal.kafka.telemetry.StatsTool <broker pid>}.
 *
 * <p>It attaches to the broker's JVM (same user), starts its local management agent (no port is opened) and
 * reads every attribute of {@code kafka.server:type=portal-telemetry-exporter}; exit status 2 when that MBean
 * is not registered (no exporter configured), 1 on other errors.
 */
public final class StatsTool {

    private StatsTool() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: StatsTool <pid>");
            System.exit(1);
        }
        VirtualMachine vm = VirtualMachine.attach(args[0]);
        String address;
        try {
            address = vm.startLocalManagementAgent();
        } finally {
            vm.detach();
        }
        try (JMXConnector connector = JMXConnectorFactory.connect(new JMXServiceURL(address))) {
            MBeanServerConnection connection = connector.getMBeanServerConnection();
            ObjectName name = new ObjectName(ExporterStats.MBEAN_NAME);
            if (!connection.isRegistered(name)) {
                System.err.println(ExporterStats.MBEAN_NAME + " is not registered in process " + args[0]);
                System.exit(2);
            }
            StringBuilder out = new StringBuilder("{");
            for (MBeanAttributeInfo attribute : connection.getMBeanInfo(name).getAttributes()) {
                Object value = connection.getAttribute(name, attribute.getName());
                if (out.length() > 1) {
                    out.append(',');
                }
                out.append(quote(attribute.getName().toLowerCase(Locale.ROOT))).append(':');
                out.append(value instanceof Number ? value.toString() : quote(String.valueOf(value)));
            }
            System.out.println(out.append('}'));
        }
    }

    static String quote(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
