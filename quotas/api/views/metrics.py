"""The list memory limiter's metrics for Prometheus."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.views import APIView

from portal.api.errors import ErrorSerializer
from quotas.api.memory import metrics_text
from quotas.api.permissions import IsAdminOrAuditor


class MemoryMetricsView(APIView):
    """The list memory limiter's PIP-442 metrics for Prometheus (admins and auditors)."""

    permission_classes = [permissions.IsAuthenticated, IsAdminOrAuditor]

    @extend_schema(
        operation_id="memory_metrics",
        summary="List memory limiter metrics (Prometheus text format 0.0.4)",
        description="Both pools (heap, direct): bytes used and limit, queue size and limit, wait-time summary, "
        "timeouts, queue-full rejections and cancellations, named quotas_api_list_<pool>_...",
        responses={(200, "text/plain"): OpenApiTypes.STR, 401: ErrorSerializer, 403: ErrorSerializer},
    )
    def get(self, request: Request) -> HttpResponse:
        return HttpResponse(metrics_text(), content_type="text/plain; version=0.0.4")
