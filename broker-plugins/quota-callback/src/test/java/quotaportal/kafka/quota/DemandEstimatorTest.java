package quotaportal.kafka.quota;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.metrics.JmxReporter;
import org.apache.kafka.common.metrics.KafkaMetricsContext;
import org.apache.kafka.common.metrics.MetricConfig;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.metrics.stats.Rate;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.Test;

/** The demand estimate: the formula, and what it makes of Kafka's own windowed quota rate (its Rate stat). */
class DemandEstimatorTest {

    @Test
    void theFirstSampleIsTakenAsItIs() {
        DemandEstimator e = new DemandEstimator(10);
        assertEquals(500.0, e.update(500, 1_000));
        assertEquals(500.0, e.last());
    }

    @Test
    void aRisingRateMeansDemandAboveTheWindowsAverage() {
        DemandEstimator e = new DemandEstimator(10);
        e.update(100, 0);
        // r = 200, slope 100/s over a window of 10 s: 200 + 100 * 10
        assertEquals(1_200.0, e.update(200, 1_000), 1e-9);
        // half a second later, the same rise per second
        assertEquals(250 + 50 / 0.5 * 10, e.update(250, 1_500), 1e-9);
    }

    @Test
    void aFallingRateMeansLessAndNeverBelowZero() {
        DemandEstimator e = new DemandEstimator(10);
        e.update(1_000, 0);
        // 900 - 100 * 10 < 0: the demand fell to nothing (clamped)
        assertEquals(0.0, e.update(900, 1_000), 1e-9);
        DemandEstimator slow = new DemandEstimator(2);
        slow.update(1_000, 0);
        assertEquals(900 - 100 * 2.0, slow.update(900, 1_000), 1e-9);
    }

    @Test
    void aSteadyRateIsTheDemand() {
        DemandEstimator e = new DemandEstimator(10);
        for (int i = 0; i < 5; i++) {
            assertEquals(4_096.0, e.update(4_096, i * 1_000L), 1e-9);
        }
    }

    @Test
    void unknownOrNegativeRatesCountAsNothing() {
        DemandEstimator e = new DemandEstimator(10);
        assertEquals(0.0, e.update(Double.NaN, 0));
        assertEquals(0.0, e.update(-5, 1_000));
    }

    @Test
    void theWindowIsKafkasQuotaWindowsButOne() {
        BudgetSettings s = BudgetSettings.from(Map.of("node.id", "3", "quota.window.num", "11",
                "quota.window.size.seconds", "2"));
        assertEquals(20.0, s.rateWindowSeconds());
        assertEquals(3, s.brokerId());
        assertEquals(10.0, BudgetSettings.from(Map.of("broker.id", "1")).rateWindowSeconds());
    }

    @Test
    void theDrainHoldAndTheRampAreReadAndABadValueIsRefusedByName() {
        BudgetSettings defaults = BudgetSettings.from(Map.of("broker.id", "1"));
        assertEquals(3_000L, defaults.drainHoldMs());
        assertTrue(defaults.windowRamp());
        BudgetSettings off = BudgetSettings.from(Map.of("broker.id", "1", "quota.budget.drain.hold.ms", "0",
                "quota.budget.window.ramp", "FALSE"));
        assertEquals(0L, off.drainHoldMs());
        assertFalse(off.windowRamp());
        ConfigException negative = assertThrows(ConfigException.class, () -> BudgetSettings.from(Map.of(
                "broker.id", "1", "quota.budget.drain.hold.ms", "-1")));
        assertTrue(negative.getMessage().contains("quota.budget.drain.hold.ms"), negative.getMessage());
        ConfigException notBoolean = assertThrows(ConfigException.class, () -> BudgetSettings.from(Map.of(
                "broker.id", "1", "quota.budget.window.ramp", "maybe")));
        assertTrue(notBoolean.getMessage().contains("true or false"), notBoolean.getMessage());
    }

    /** A clock the test moves. */
    static final class ManualTime implements Time {
        long ms;

        @Override
        public long milliseconds() {
            return ms;
        }

        @Override
        public long nanoseconds() {
            return TimeUnit.MILLISECONDS.toNanos(ms);
        }

        @Override
        public void sleep(long sleepMs) {
            ms += sleepMs;
        }
    }

    /**
     * Kafka's quota sensor (a Rate over 11 windows of 1 s), read through JMX as the plugin reads it: after a step of
     * demand its rate shows a tenth of the step in the first second and all of it only after ten; the estimate has
     * the step at once, and the drop to nothing as soon as the rate falls.
     */
    @Test
    void followsAStepOfKafkasWindowedRateWithinASecond() {
        ManualTime time = new ManualTime();
        time.ms = 1_000_000;
        MetricConfig config = new MetricConfig().samples(11).timeWindow(1, TimeUnit.SECONDS);
        try (Metrics metrics = new Metrics(config, List.of(new JmxReporter()), time,
                new KafkaMetricsContext("kafka.server"))) {
            // the name the plugin reads: odd characters quoted as Kafka's JmxReporter quotes them
            SensorKey key = new SensorKey(ClientQuotaType.PRODUCE, "al%2Cice", "c:d \"x\"");
            Map<String, String> tags = new java.util.LinkedHashMap<>();
            tags.put("user", key.user());
            tags.put("client-id", key.clientId());
            Sensor sensor = metrics.sensor("Produce-" + key.user() + ":" + key.clientId());
            MetricName name = metrics.metricName("byte-rate", "Produce", "", tags);
            sensor.add(name, new Rate(), config);
            JmxRates rates = new JmxRates();
            assertTrue(rates.exists(key), "the sensor's MBean " + JmxRates.sensorName(key));
            DemandEstimator estimate = new DemandEstimator(10);
            double demand = 1_000_000; // bytes/s from the step on
            sensor.record(0, time.ms);
            estimate.update(rates.rate(key), time.ms);
            for (int second = 1; second <= 30; second++) {
                double want = second <= 20 ? demand : 0;
                for (int tick = 0; tick < 100; tick++) {
                    time.ms += 10;
                    if (want > 0) {
                        sensor.record(want / 100, time.ms);
                    }
                }
                double rate = rates.rate(key);
                double d = estimate.update(rate, time.ms);
                if (second <= 2) {
                    assertTrue(rate < 0.3 * demand, "Kafka's rate lags: " + rate + " at " + second + " s");
                    assertTrue(d > 0.9 * demand, "the estimate does not: " + d + " at " + second + " s");
                }
                if (second >= 13 && second <= 20) {
                    assertEquals(demand, d, 0.05 * demand, "steady at " + second + " s (rate " + rate + ")");
                }
                if (second >= 21 && second <= 25) {
                    assertTrue(rate > 0.3 * demand, "the rate remembers the window: " + rate + " at " + second + " s");
                    assertTrue(d < 0.01 * demand, "the demand is gone: " + d + " at " + second + " s");
                }
            }
        }
    }
}
