"""A quota group's members' parts of its shared sensor, for the Prometheus source (``observe.kafka_quotas``).

The members of a group share one Kafka sensor (user ``group@<name>``), so Kafka measures only their sum. The portal's
quota callback counts each member's requests per broker (``kafka_server_quota_group_member_requests_total``); a
member's share of the group's requests, times the sensor's rate, is its estimated part (by request counts, not
bytes). Plain Python.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

GROUP_TAG = "group@"  # engine.groups.TAG_PREFIX: the user tag of a quota group's shared sensor
MEMBER_REQUESTS = "kafka_server_quota_group_member_requests_total"
MEMBERS_KEPT = 20  # members listed per group sample; the rest are summed into one entry


def member_parts(members: Iterable[tuple[str, str, float]], rate: float | None) -> list[dict[str, Any]]:
    """Each member's share of its group's requests and estimated part of the group's ``rate`` (share x rate),
    busiest first; past ``MEMBERS_KEPT`` the rest as one ``others`` entry."""
    ranked = sorted(members, key=lambda m: (-m[2], m[0], m[1]))
    total = sum(m[2] for m in ranked)

    def entry(rps: float) -> dict[str, Any]:
        share = rps / total if total else None
        return {"rps": rps, "share": share, "part": share * rate if share is not None and rate is not None else None}

    out = [{"u": u, "c": c, **entry(rps)} for u, c, rps in ranked[:MEMBERS_KEPT]]
    rest = ranked[MEMBERS_KEPT:]
    if rest:
        out.append({"others": len(rest), **entry(sum(m[2] for m in rest))})
    return out
