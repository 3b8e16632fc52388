"""What every view of the quota API shares: error responses, memory-bounded lists, the cluster of the URL."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.errors import ApiError, ErrorSerializer
from quotas.api.memory import memory_permits, page_bytes
from quotas.models import Cluster

ERRORS = {
    400: ErrorSerializer,
    401: ErrorSerializer,
    403: ErrorSerializer,
    404: ErrorSerializer,
}
#: List endpoints also answer 503 RESOURCE_EXHAUSTED when the list memory pool is busy (quotas/api/memory.py).
LIST_ERRORS = {**ERRORS, 503: ErrorSerializer}

# Per-row memory estimates of a page being built: model instances, prefetched/related rows and the serialized
# dicts, measured with tracemalloc on SQLite (describe: ~5.7 KB an entity with 3 values; audit: ~2.3 KB an entry)
# and rounded up about 2x for more values and longer names, comments and JSON. A page holds (page_size + 1)
# rows, the extra one telling cursor pagination whether there is a next page; at the default 50 rows a describe
# page takes ~600 KiB, so the default 64 MiB pool lets ~100 such pages be built at once.
DESCRIBE_ROW_BYTES = 12 << 10  # an entity and up to 5 quota values
AUDIT_ROW_BYTES = 6 << 10  # an entry, its tenant and cluster, JSON before/after and a comment
REQUEST_ROW_BYTES = 12 << 10  # a request, its tenant, cluster, requester and approval (not measured: as describe)
CONFIG_ROW_BYTES = 4 << 10  # a broker or topic config and its broker
PUSH_ROW_BYTES = 4 << 10  # a push, its cluster and broker, and an error message (not measured: as configs)
DRIFT_ROW_BYTES = 6 << 10  # a drift row, its cluster and broker, two values and an entity's JSON (as audit)


def page_estimate(paginator: Any, request: Request, row_bytes: int) -> int:
    """The bytes a page of this request may take: (page_size + 1) rows x the per-row estimate."""
    return page_bytes(paginator.get_page_size(request) + 1, row_bytes)


class MemoryBoundedListMixin:
    """``list`` holds its page's estimated bytes from the process-wide list pool while it builds the page."""

    row_bytes: int

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        with memory_permits(page_estimate(self.paginator, request, self.row_bytes)):  # type: ignore[attr-defined]
            return super().list(request, *args, **kwargs)  # type: ignore[misc]


def get_cluster(name: str) -> Cluster:
    """The cluster of the URL, or NOT_FOUND saying where the list is."""
    try:
        return Cluster.objects.select_related("desired_state").get(name=name)
    except Cluster.DoesNotExist:
        message = f"No cluster named {name!r}; GET /api/clusters/ lists them."
        raise ApiError("NOT_FOUND", message, status_code=404) from None


CLUSTER_PARAM = OpenApiParameter("cluster", OpenApiTypes.STR, OpenApiParameter.PATH, description="The cluster's name.")

#: What views that act on an object in a state answer besides ERRORS: 409 when its state refuses the change.
SCOPED_ERRORS = {**ERRORS, 409: ErrorSerializer}
