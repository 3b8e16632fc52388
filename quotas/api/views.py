"""Views of the quota API.

Reads are open to any authenticated caller. Writes (AlterClientQuotas, creating and
updating clusters) need a staff account for now: tenants and their self-service
requests come later and will narrow who may change what.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, viewsets
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.pagination import DefaultCursorPagination
from quotas.api.errors import ApiError, ErrorSerializer
from quotas.api.serializers import (
    AlterRequestSerializer,
    AlterResponseSerializer,
    ClusterSerializer,
    DescribeEntrySerializer,
    DescribePageSerializer,
    DescribeRequestSerializer,
    EffectiveQuerySerializer,
    EffectiveQuotaSerializer,
    EffectiveResponseSerializer,
    EntryResultSerializer,
)
from quotas.engine.connections import normalize_ip
from quotas.models import (
    Alteration,
    AlterationRejected,
    Cluster,
    FilterComponent,
    QuotaOp,
    alter_client_quotas,
    describe_client_quotas,
    effective_client_quotas,
    effective_ip_quota,
)

ERRORS = {
    400: ErrorSerializer,
    401: ErrorSerializer,
    403: ErrorSerializer,
    404: ErrorSerializer,
}
STAFF_ONLY = "Only staff accounts can change quotas and clusters for now; ask a portal admin."


class IsStaff(permissions.BasePermission):
    """Staff only (until tenants can own entities)."""

    message = STAFF_ONLY

    def has_permission(self, request: Request, view: APIView) -> bool:
        return bool(request.user and request.user.is_staff)


class IsStaffOrReadOnly(IsStaff):
    """Anyone authenticated reads; staff writes."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.method in permissions.SAFE_METHODS or super().has_permission(request, view)


def get_cluster(name: str) -> Cluster:
    """The cluster of the URL, or NOT_FOUND saying where the list is."""
    try:
        return Cluster.objects.select_related("desired_state").get(name=name)
    except Cluster.DoesNotExist:
        message = f"No cluster named {name!r}; GET /api/clusters/ lists them."
        raise ApiError("NOT_FOUND", message, status_code=404) from None


class EntityCursorPagination(DefaultCursorPagination):
    """Oldest entity first, so a describe reads as the quotas were added."""

    ordering = "pk"


class LenientJSONParser(JSONParser):
    """JSON that may carry NaN and Infinity (Python's json.dumps writes them), so the engine can refuse them by name."""

    strict = False


@extend_schema_view(
    list=extend_schema(summary="List clusters"),
    retrieve=extend_schema(summary="A cluster", responses={200: ClusterSerializer, 404: ErrorSerializer}),
    create=extend_schema(summary="Add a cluster (staff)", responses={201: ClusterSerializer, **ERRORS}),
    update=extend_schema(summary="Change a cluster (staff)", responses={200: ClusterSerializer, **ERRORS}),
    partial_update=extend_schema(
        summary="Change some fields of a cluster (staff)", responses={200: ClusterSerializer, **ERRORS}
    ),
)
class ClusterViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """Clusters, by name. Anyone authenticated reads; only staff creates or changes them (no deletes here:
    a cluster's quotas and push history go with it, which deserves its own confirmation)."""

    serializer_class = ClusterSerializer
    permission_classes = [permissions.IsAuthenticated, IsStaffOrReadOnly]
    lookup_field = "name"
    lookup_url_kwarg = "cluster"
    lookup_value_regex = r"[A-Za-z0-9][A-Za-z0-9_-]*"  # cluster_name_validator, unanchored

    def get_queryset(self) -> QuerySet[Cluster]:
        return Cluster.objects.select_related("desired_state").prefetch_related("brokers", "listeners")

    def get_object(self) -> Cluster:
        cluster = get_cluster(self.kwargs["cluster"])
        self.check_object_permissions(self.request, cluster)
        return cluster


CLUSTER_PARAM = OpenApiParameter("cluster", OpenApiTypes.STR, OpenApiParameter.PATH, description="The cluster's name.")


class DescribeClientQuotasView(APIView):
    """Kafka's DescribeClientQuotas over the cluster's desired state, a page at a time."""

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        operation_id="describe_client_quotas",
        summary="Describe client quotas (Kafka's DescribeClientQuotas)",
        description=(
            "Filter components: `exact` matches the name, `default` the default entity, `specified` any "
            "non-default name. `strict`: the entity has exactly the filtered entity types; otherwise it may have "
            "more. No components and strict=false lists every entity. Answers are paged by cursor: to read on, "
            "POST the same body to the `next` URL."
        ),
        parameters=[
            CLUSTER_PARAM,
            OpenApiParameter("cursor", OpenApiTypes.STR, OpenApiParameter.QUERY, description="From `next`."),
            OpenApiParameter("page_size", OpenApiTypes.INT, OpenApiParameter.QUERY, description="At most 500."),
        ],
        request=DescribeRequestSerializer,
        responses={200: DescribePageSerializer, **ERRORS},
    )
    def post(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        query = DescribeRequestSerializer(data=request.data)
        query.is_valid(raise_exception=True)
        components = [FilterComponent(**c) for c in query.validated_data["components"]]
        entities = describe_client_quotas(target, components, query.validated_data["strict"])
        paginator = EntityCursorPagination()
        page = paginator.paginate_queryset(entities, request, view=self)
        return paginator.get_paginated_response(DescribeEntrySerializer(page, many=True).data)


class AlterClientQuotasView(APIView):
    """Kafka's AlterClientQuotas on the desired state (staff only for now).

    Whole or nothing: every entry is validated first with the engine's rules, and if any is
    invalid the request fails with 400 INVALID_REQUEST, ``details.entries`` holding Kafka's
    per-entry answer (NONE or the error) and nothing is written. Kafka itself applies the
    valid entries of a batch; we do not, because the batch is one operator's (later: one
    approved request's) intended change, and a half-applied one would be pushed to every
    broker as a desired state nobody asked for. A valid batch is applied in one transaction
    that bumps the cluster's desired-state version.
    """

    permission_classes = [permissions.IsAuthenticated, IsStaff]
    parser_classes = [LenientJSONParser]

    @extend_schema(
        operation_id="alter_client_quotas",
        summary="Alter client quotas (Kafka's AlterClientQuotas), whole or nothing (staff)",
        parameters=[CLUSTER_PARAM],
        request=AlterRequestSerializer,
        responses={200: AlterResponseSerializer, **ERRORS},
    )
    def post(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        body = AlterRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        entries = [
            Alteration(
                entity=[(c["entity_type"], c["name"]) for c in e["entity"]],
                ops=[QuotaOp(o["key"], o["value"], o["remove"]) for o in e["ops"]],
            )
            for e in body.validated_data["entries"]
        ]
        validate_only = body.validated_data["validate_only"]
        try:
            outcome = alter_client_quotas(target, entries, validate_only=validate_only)
        except AlterationRejected as e:
            details = {"entries": EntryResultSerializer(e.results, many=True).data}
            raise ApiError("INVALID_REQUEST", e.message, details) from e
        return Response(AlterResponseSerializer((outcome, validate_only)).data)


class EffectiveQuotaView(APIView):
    """Which quota applies to a connection, and why: Kafka's precedence walked over the desired state."""

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        operation_id="effective_quota",
        summary="The quota that applies to a user and client-id, or to an ip",
        description=(
            "For user + client_id: each client key's value, the precedence level (1..8) and config path that "
            "supplied it, and the more specific levels that hold nothing. For ip: connection_creation_rate from "
            "the ip itself (level 1) or the `<default>` ip (level 2)."
        ),
        parameters=[CLUSTER_PARAM, EffectiveQuerySerializer],
        responses={200: EffectiveResponseSerializer, **ERRORS},
    )
    def get(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        query = EffectiveQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q: dict[str, Any] = query.validated_data
        if "ip" in q:
            ip = normalize_ip(q["ip"])  # an invalid address is the engine's INVALID_REQUEST
            found = [effective_ip_quota(target, ip)]
            who = {"user": None, "client_id": None, "ip": ip}
        else:
            found = effective_client_quotas(target, q["user"], q["client_id"])
            who = {"user": q["user"], "client_id": q["client_id"], "ip": None}
        quotas = {e.key: EffectiveQuotaSerializer(e).data for e in found}
        return Response({"cluster": target.name, **who, "quotas": quotas})
