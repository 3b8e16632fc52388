"""The cluster names a request to telemetry_ui may carry: what both the live relay's WebSocket (``live``) and the
KIP-714 and OTLP ingestion (``ingest``) check before they touch Redis, so neither sub-package imports the other."""

from __future__ import annotations

import re
from typing import Any

CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")  # quotas.models.clusters.cluster_name_validator


def check_cluster_name(value: Any) -> str | None:
    """Why ``value`` is not a cluster name, or None."""
    if not isinstance(value, str) or not value:
        return "'cluster' must be a cluster's name (a non-empty string)."
    if not CLUSTER_NAME.match(value):
        return f"{value[:80]!r} is not a cluster name (letters, digits, '-' and '_', at most 64)."
    return None
