package quotaportal.kafka.quota;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.Test;

import quotaportal.kafka.quota.BudgetCoordinator.Report;
import quotaportal.kafka.quota.BudgetCoordinator.SensorBudget;
import quotaportal.kafka.quota.QuotaTable.EntityKey;

/** Which budgets a round carries: what moved materially, everything when the engine may have lost track. */
class ReportDeltaTest {
    private static final String FIELD = "produce {\"user\":\"alice\"}";
    private static final SensorBudget ALICE = new SensorBudget(new SensorKey(ClientQuotaType.PRODUCE, "alice", ""),
            EntityKey.user("alice"), 3_000);
    private static final SensorBudget CAROL = new SensorBudget(new SensorKey(ClientQuotaType.PRODUCE, "carol", ""),
            EntityKey.user("carol"), 3_000);
    private static final long LEASE = 10_000;

    private static Report alice(double demand, boolean saturated) {
        return new Report(ALICE, FIELD, demand, saturated);
    }

    private static ReportDelta.Selection round(ReportDelta delta, List<Report> reports, long now) {
        ReportDelta.Selection s = delta.select(reports, r -> 1_000.0, now, LEASE, 0.05);
        delta.accepted(s, s.reports().stream().map(r -> true).toList(), false, now);
        return s;
    }

    @Test
    void onlyWhatMovedMateriallyIsReported() {
        ReportDelta delta = new ReportDelta();
        assertTrue(round(delta, List.of(alice(500, false)), 0).whole(), "the first round is whole");
        // 5 % of the 1000 share it enforces is 50: a move of 50 is not reported, one of 51 is
        assertEquals(List.of(), round(delta, List.of(alice(550, false)), 1_000).reports());
        assertEquals(1, round(delta, List.of(alice(551, false)), 2_000).reports().size());
        // measured from what was last sent, so a slow drift is reported once it adds up
        assertEquals(List.of(), round(delta, List.of(alice(590, false)), 3_000).reports());
        assertEquals(1, round(delta, List.of(alice(610, false)), 4_000).reports().size());
        assertEquals(1, round(delta, List.of(alice(610, true)), 5_000).reports().size(), "saturation flipped");
        Report other = new Report(new SensorBudget(ALICE.sensor(), ALICE.entity(), 4_000), FIELD, 610, true);
        assertEquals(List.of(other), round(delta, List.of(other), 6_000).reports(), "B changed");
        ReportDelta.Selection joined = round(delta, List.of(other, new Report(CAROL, FIELD, 0, false)), 7_000);
        assertEquals(1, joined.reports().size(), "a budget new to the engine");
        assertFalse(joined.whole());
    }

    @Test
    void aBudgetNoLongerReportedIsLeftOnce() {
        ReportDelta delta = new ReportDelta();
        round(delta, List.of(alice(500, false), new Report(CAROL, FIELD, 0, false)), 0);
        ReportDelta.Selection s = round(delta, List.of(alice(500, false)), 1_000);
        assertEquals(List.of(CAROL.sensor().budgetId()), s.leaving());
        assertEquals(List.of(), round(delta, List.of(alice(500, false)), 2_000).leaving());
    }

    @Test
    void everythingIsReportedAfterAFailureAHalfLeaseGapOrWhenTheEngineAsks() {
        ReportDelta delta = new ReportDelta();
        round(delta, List.of(alice(500, false)), 0);
        delta.failed();
        assertEquals(1, round(delta, List.of(alice(500, false)), 1_000).reports().size(), "after a failed round");
        assertEquals(List.of(), round(delta, List.of(alice(500, false)), 2_000).reports());
        assertEquals(1, round(delta, List.of(alice(500, false)), 2_000 + LEASE / 2 + 1).reports().size(),
                "half a lease without a good round: the engine may have swept its entries");
        ReportDelta.Selection s = delta.select(List.of(alice(500, false)), r -> 1_000.0, 8_000, LEASE, 0.05);
        delta.accepted(s, List.of(), true, 8_000);
        assertTrue(delta.select(List.of(alice(500, false)), r -> 1_000.0, 9_000, LEASE, 0.05).whole(),
                "the engine asked for a whole report");
    }
}
