"""Each committed move of a request, to the WebSockets watching its cluster's requests, on every replica.

``quotas.models.request_changed`` is sent in the process that committed the move (the portal replica that
took the approval, the Celery worker whose push settled it); this receiver hands it to the Channels layer (the
shared Redis), whose group ``req.cluster.<cluster>`` reaches the consumers of every replica
(``subscribe_requests`` on ``/ws/monitor/``). Every kind of request moves there: quota requests, KIP-714
client-metrics subscription requests and grouped plan requests, each message naming its ``kind`` (ids are per
kind). A layer that is down costs the live update, never the move.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from quotas.models import PlanRequest, QuotaRequest, SubscriptionRequest, request_changed

from .monitoring import requests_group

log = logging.getLogger("telemetry_ui.request_events")  # the name it logged under before live/ existed


#: The request models and the ``kind`` their moves are sent as.
KINDS: dict[type, str] = {QuotaRequest: "quota", SubscriptionRequest: "subscription", PlanRequest: "plan"}


def forward(sender: type, request_id: int, state: str, at: datetime | None = None, **_: Any) -> None:
    """Send one move to its cluster's requests group (cluster and tenant read from the database: one query)."""
    layer = get_channel_layer()
    kind = KINDS.get(sender)
    if layer is None or kind is None:
        return
    row = sender.objects.filter(pk=request_id).values("cluster__name", "tenant_id", "tenant__name").first()
    if row is None:
        return
    message = {
        "type": "req.changed",
        "kind": kind,
        "cluster": row["cluster__name"],
        "request_id": request_id,
        "state": state,
        "tenant_id": row["tenant_id"],
        "tenant": row["tenant__name"],
        "at": at.isoformat() if at is not None else None,
    }
    try:
        async_to_sync(layer.group_send)(requests_group(row["cluster__name"]), message)
    except Exception as e:  # Redis down, or called from an event loop's own thread: the move stands
        log.warning("could not announce %s request #%s (%s) live: %s", kind, request_id, state, e)


for _model, _kind in KINDS.items():
    request_changed.connect(forward, sender=_model, dispatch_uid=f"telemetry_ui.live.request_events.forward.{_kind}")
