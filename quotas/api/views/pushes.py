"""Push status and drift: operational, read by admins and auditors."""

from __future__ import annotations

import re
from typing import Any

from django.db.models import Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, viewsets

from portal.api.errors import ApiError, ErrorSerializer
from quotas.api.params import INT64_MAX, int_param, read_int
from quotas.api.permissions import SeesEveryPush, SeesOperations
from quotas.api.serializers.pushes import DriftSerializer, PushSerializer
from quotas.api.views.base import DRIFT_ROW_BYTES, PUSH_ROW_BYTES, MemoryBoundedListMixin
from quotas.models import Drift, DriftStatus, Push, PushState

_NUMBER = re.compile(r"[0-9]{1,18}")


def _number_param(params: Any, name: str) -> int | None:
    return read_int(params, name, 0, INT64_MAX)


def _choice_param(params: Any, name: str, choices: list[str]) -> str | None:
    raw = params.get(name, "")
    if raw == "":
        return None
    if raw not in choices:
        message = f"{name} must be one of {', '.join(choices)}, got {raw!r}."
        raise ApiError("INVALID_REQUEST", message, {name: [message]})
    return raw


def _broker_param(params: Any) -> Q | None:
    """``broker``: a broker id, or ``null`` for the cluster-wide namespace."""
    raw = params.get("broker", "")
    if raw == "":
        return None
    if raw == "null":
        return Q(broker__isnull=True)
    if not _NUMBER.fullmatch(raw):
        message = f"broker must be a broker id, or null for the cluster-wide namespace, got {raw!r}."
        raise ApiError("INVALID_REQUEST", message, {"broker": [message]})
    return Q(broker__broker_id=int(raw))


def _bool_param(params: Any, name: str, default: bool) -> bool:
    raw = params.get(name, "").lower()
    if raw == "":
        return default
    if raw in ("true", "1", "yes"):
        return True
    if raw in ("false", "0", "no"):
        return False
    message = f"{name} must be true or false, got {params.get(name)!r}."
    raise ApiError("INVALID_REQUEST", message, {name: [message]})


BROKER_FILTER = OpenApiParameter(
    "broker",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    description="A broker id, or null for the cluster-wide namespace.",
)
CLUSTER_FILTER = OpenApiParameter("cluster", OpenApiTypes.STR, OpenApiParameter.QUERY, description="A cluster's name.")


@extend_schema_view(
    list=extend_schema(
        summary="Push status per desired-state version and broker, newest first (admins and auditors)",
        description=(
            "One row per (cluster, version, broker): pending (being pushed or retried), applied or failed (refused "
            "by the broker), with the attempts and the last error. Tenant members see the pushes of their own "
            "requests on GET /api/requests/{id}/ instead."
        ),
        parameters=[
            CLUSTER_FILTER,
            int_param("version", 0, INT64_MAX, "A desired-state version."),
            BROKER_FILTER,
            OpenApiParameter("state", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=PushState.values),
        ],
        responses={200: PushSerializer(many=True), 400: ErrorSerializer, 403: ErrorSerializer, 503: ErrorSerializer},
    )
)
class PushViewSet(MemoryBoundedListMixin, mixins.ListModelMixin, viewsets.GenericViewSet):
    """Where each desired-state version has landed. Read-only; the workers write it."""

    row_bytes = PUSH_ROW_BYTES

    serializer_class = PushSerializer
    permission_classes = [permissions.IsAuthenticated, SeesEveryPush]

    def get_queryset(self) -> QuerySet[Push]:
        rows = Push.objects.select_related("cluster", "broker")
        params = self.request.query_params
        if params.get("cluster"):
            rows = rows.filter(cluster__name=params["cluster"])
        version = _number_param(params, "version")
        if version is not None:
            rows = rows.filter(version=version)
        broker = _broker_param(params)
        if broker is not None:
            rows = rows.filter(broker)
        state = _choice_param(params, "state", PushState.values)
        if state is not None:
            rows = rows.filter(state=state)
        return rows


@extend_schema_view(
    list=extend_schema(
        summary="Drift: where brokers differ from desired state, newest first (admins and auditors)",
        description=(
            "What the reconcile job found on a broker that desired state does not say: missing (desired, not on the "
            "broker), extra (on the broker, not desired) or different. Open rows by default (`open=false` lists "
            "resolved ones too: healed by re-applying desired state, or converged when the difference went away). "
            "POST /api/clusters/{cluster}/reapply/ heals a broker."
        ),
        parameters=[
            CLUSTER_FILTER,
            BROKER_FILTER,
            OpenApiParameter("status", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=DriftStatus.values),
            OpenApiParameter(
                "open",
                OpenApiTypes.BOOL,
                OpenApiParameter.QUERY,
                default=True,
                description="true: only unresolved drift; false: every row.",
            ),
        ],
        responses={200: DriftSerializer(many=True), 400: ErrorSerializer, 403: ErrorSerializer, 503: ErrorSerializer},
    )
)
class DriftViewSet(MemoryBoundedListMixin, mixins.ListModelMixin, viewsets.GenericViewSet):
    """Differences between brokers and desired state. Read-only: reconcile writes it, re-applying heals it."""

    row_bytes = DRIFT_ROW_BYTES

    serializer_class = DriftSerializer
    permission_classes = [permissions.IsAuthenticated, SeesOperations]

    def get_queryset(self) -> QuerySet[Drift]:
        rows = Drift.objects.select_related("cluster", "broker")
        params = self.request.query_params
        if _bool_param(params, "open", True):
            rows = rows.filter(resolved_at__isnull=True)
        if params.get("cluster"):
            rows = rows.filter(cluster__name=params["cluster"])
        broker = _broker_param(params)
        if broker is not None:
            rows = rows.filter(broker)
        drift_status = _choice_param(params, "status", DriftStatus.values)
        if drift_status is not None:
            rows = rows.filter(status=drift_status)
        return rows
