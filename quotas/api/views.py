"""Views of the quota API.

Clusters: reads are open to any authenticated caller; writes (AlterClientQuotas, creating and
updating clusters) are for admins (staff or the quota-admins group; never an auditor). Quota values
are scoped like requests: a tenant member describes only the entities its tenants own (and the
``<default>`` ones), and asks for the effective quota of its own principals and client-ids only.
Tenants, quota requests and the audit trail are scoped: admins and auditors see everything, a tenant
member sees its tenants' rows only (others' rows answer NOT_FOUND, so their existence does not leak).
Push status and drift are operational: admins and auditors read them (a member sees its own request's
pushes on the request), and only admins re-apply desired state to a broker.
"""

from __future__ import annotations

import re
from typing import Any

import kombu.exceptions
import redis
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import ProtectedError, Q, QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from engine.connections import normalize_ip
from quotas.api.errors import ApiError, ErrorSerializer
from quotas.api.memory import memory_permits, metrics_text, page_bytes
from quotas.api.pagination import PAGE_SIZE_PARAM, DefaultCursorPagination
from quotas.api.params import INT64_MAX, id_param, int_param, read_id, read_int
from quotas.api.serializers import (
    AdoptRequestSerializer,
    AdoptResponseSerializer,
    AlterConfigsRequestSerializer,
    AlterConfigsResponseSerializer,
    AlterRequestSerializer,
    AlterResponseSerializer,
    ApproveSerializer,
    AuditEntrySerializer,
    ClusterDetailSerializer,
    ClusterSerializer,
    ConfigEntrySerializer,
    ConfigPageSerializer,
    DecisionSerializer,
    DescribeEntrySerializer,
    DescribePageSerializer,
    DescribeRequestSerializer,
    DriftSerializer,
    EffectiveQuerySerializer,
    EffectiveQuotaSerializer,
    EffectiveResponseSerializer,
    EntryResultSerializer,
    PushSerializer,
    PushSummarySerializer,
    QuotaRequestCreateSerializer,
    QuotaRequestDetailSerializer,
    QuotaRequestSerializer,
    ReapplyRequestSerializer,
    ReapplyResponseSerializer,
    RejectSerializer,
    TenantSerializer,
    push_summary,
)
from quotas.choices import ConnectorKind, QuotaScope
from quotas.models import (
    Alteration,
    AlterationRejected,
    AuditEntry,
    Broker,
    BrokerConfig,
    Cluster,
    ConfigOp,
    ConfigResource,
    Drift,
    DriftStatus,
    FilterComponent,
    InvalidConfig,
    Push,
    PushState,
    QuotaOp,
    QuotaRequest,
    RequestState,
    Tenant,
    TopicConfig,
    alter_client_quotas,
    alter_configs,
    audited_alter,
    describe_client_quotas,
    effective_client_quotas,
    effective_ip_quota,
    is_admin,
    sees_everything,
    tenants_of,
)
from quotas.models.tenants import member_tenants, owned_by_any, quota_visible
from quotas.push import resolve
from quotas.workflow import quota_requests

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
STAFF_ONLY = (
    "Only admins (staff or the quota-admins group) can change quotas, clusters and tenants; tenants ask for "
    "quotas with POST /api/requests/."
)


class IsAdmin(permissions.BasePermission):
    """Admins only: staff or the quota-admins group, never an auditor."""

    message = STAFF_ONLY

    def has_permission(self, request: Request, view: APIView) -> bool:
        return is_admin(request.user)


class IsAdminOrReadOnly(IsAdmin):
    """Anyone authenticated reads; admins write."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.method in permissions.SAFE_METHODS or super().has_permission(request, view)


class IsAdminOrAuditor(permissions.BasePermission):
    """Operational views (metrics) are for the people who run the portal: admins and auditors."""

    message = "Only admins and auditors read the portal's metrics."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return sees_everything(request.user)


class SeesOperations(permissions.BasePermission):
    """Push status and drift are for the people who run the portal: admins and auditors."""

    message = "Only admins and auditors read push status and drift."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return sees_everything(request.user)


class SeesEveryPush(SeesOperations):
    message = (
        "Only admins and auditors list every push; you see the pushes of your own requests on each request: "
        "GET /api/requests/{id}/ (its `pushes`)."
    )


REAPPLY_ADMINS_ONLY = (
    "Only admins (staff or the quota-admins group; never auditors) re-apply desired state to brokers."
)


class IsAdminToReapply(IsAdmin):
    message = REAPPLY_ADMINS_ONLY


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
    retrieve=extend_schema(
        summary="A cluster, with its budget enforcement",
        description="`budget_enforcement` says whether its cluster-wide budgets are shared out by demand "
        "(coordinated), a broker is on its fallback, or no broker's plugin reports (off).",
        responses={200: ClusterDetailSerializer, 404: ErrorSerializer},
    ),
    create=extend_schema(summary="Add a cluster (admins)", responses={201: ClusterSerializer, **ERRORS}),
    update=extend_schema(summary="Change a cluster (admins)", responses={200: ClusterSerializer, **ERRORS}),
    partial_update=extend_schema(
        summary="Change some fields of a cluster (admins)", responses={200: ClusterSerializer, **ERRORS}
    ),
)
class ClusterViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """Clusters, by name. Anyone authenticated reads; only admins create or change them (no deletes here:
    a cluster's quotas and push history go with it, which deserves its own confirmation)."""

    serializer_class = ClusterSerializer
    permission_classes = [permissions.IsAuthenticated, IsAdminOrReadOnly]
    lookup_field = "name"
    lookup_url_kwarg = "cluster"
    lookup_value_regex = r"[A-Za-z0-9][A-Za-z0-9_-]*"  # cluster_name_validator, unanchored

    def get_queryset(self) -> QuerySet[Cluster]:
        return Cluster.objects.select_related("desired_state").prefetch_related("brokers", "listeners")

    def get_serializer_class(self) -> type[ClusterSerializer]:
        return ClusterDetailSerializer if self.action == "retrieve" else ClusterSerializer

    def get_object(self) -> Cluster:
        cluster = get_cluster(self.kwargs["cluster"])
        self.check_object_permissions(self.request, cluster)
        return cluster

    @extend_schema(
        operation_id="reapply_desired_state",
        summary="Re-apply the whole desired state to one broker of the cluster (admins)",
        description=(
            "Queues the Celery task quotas.tasks.heal, which writes the cluster's whole desired state to the target "
            "whatever version it claims, and closes the target's open drift as healed (audited, with you as the "
            "actor). `broker` names a broker id of a per_broker cluster; a cluster_wide cluster has one namespace: "
            "send null. Answers 202 once the task is queued; GET /api/drift/ and "
            "GET /api/clusters/{cluster}/pushes/summary/ show the outcome."
        ),
        request=ReapplyRequestSerializer,
        responses={202: ReapplyResponseSerializer, **ERRORS, 503: ErrorSerializer},
    )
    @action(detail=True, methods=["post"], permission_classes=[permissions.IsAuthenticated, IsAdminToReapply])
    def reapply(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        body = ReapplyRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        broker = reapply_target(target, body.validated_data["broker"])
        task_id = enqueue_heal(target, broker, request.user)
        answer = {
            "cluster": target.name,
            "broker": broker.broker_id if broker is not None else None,
            "task_id": task_id,
            "status": "queued",
        }
        return Response(ReapplyResponseSerializer(answer).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        operation_id="adopt_drift",
        summary="Adopt what the cluster holds into desired state, for some quota drift (admins)",
        description=(
            "For each named open quota drift row: an extra or different quota's value on the cluster becomes the "
            "desired value, a missing one is removed from desired state. One new desired-state version, audited with "
            "you as the actor; the rows close as adopted. All or nothing: a row that is not open, or is a config "
            "(re-apply those instead), refuses the whole call with INVALID_REQUEST."
        ),
        request=AdoptRequestSerializer,
        responses={200: AdoptResponseSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], permission_classes=[permissions.IsAuthenticated, IsAdminToReapply])
    def adopt(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        body = AdoptRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ids = sorted(set(body.validated_data["drift"]))
        try:
            version = resolve.adopt(target, ids, request.user)
        except resolve.NotAdoptable as e:
            raise ApiError("INVALID_REQUEST", str(e), {"drift": [str(e)]}) from e
        return Response(AdoptResponseSerializer({"cluster": target.name, "version": version, "adopted": ids}).data)

    @extend_schema(
        operation_id="cluster_push_summary",
        summary="Where each broker stands against the cluster's desired state (admins and auditors)",
        description=(
            "The desired-state version and, per target (each broker, or the cluster-wide namespace), the newest "
            "version the portal saw land, the pending and failed versions, the newest outstanding error and the "
            "open drift. Built from aggregate queries over the push history, never by asking the brokers."
        ),
        responses={200: PushSummarySerializer, 401: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="pushes/summary",
        url_name="push-summary",
        permission_classes=[permissions.IsAuthenticated, SeesOperations],
    )
    def pushes_summary(self, request: Request, cluster: str) -> Response:
        return Response(PushSummarySerializer(push_summary(get_cluster(cluster))).data)


def reapply_target(cluster: Cluster, broker_id: int | None) -> Broker | None:
    """The target a re-apply names: a broker of a per_broker cluster, or None for a cluster_wide one's namespace.

    INVALID_REQUEST (``details.broker``) says what to send instead.
    """
    if cluster.connector == ConnectorKind.KAFKA:
        if broker_id is not None:
            message = (
                f"Cluster {cluster.name!r} is a Kafka cluster: its quotas and configs live in its metadata, which is "
                "re-applied whole through any broker; send broker null."
            )
            raise ApiError("INVALID_REQUEST", message, {"broker": [message]})
        return None
    if cluster.scope == QuotaScope.CLUSTER_WIDE:
        if broker_id is not None:
            message = (
                f"Cluster {cluster.name!r} is cluster_wide: its brokers share one namespace, which is re-applied "
                "whole; send broker null."
            )
            raise ApiError("INVALID_REQUEST", message, {"broker": [message]})
        return None
    ids = list(cluster.brokers.order_by("broker_id").values_list("broker_id", flat=True))
    known = f"its brokers are {', '.join(map(str, ids))}" if ids else "it has no broker registered"
    if broker_id is None:
        message = (
            f"Cluster {cluster.name!r} is per_broker: each broker holds its own copy, so name the broker to "
            f"re-apply ({known})."
        )
        raise ApiError("INVALID_REQUEST", message, {"broker": [message]})
    broker = cluster.brokers.filter(broker_id=broker_id).first()
    if broker is None:
        message = f"Cluster {cluster.name!r} has no broker {broker_id}; {known}."
        raise ApiError("INVALID_REQUEST", message, {"broker": [message]})
    return broker


def enqueue_heal(cluster: Cluster, broker: Broker | None, actor: AbstractBaseUser) -> str:
    """Queue ``quotas.tasks.heal`` for one target; returns the task id. 503 when the queue (Redis) is unreachable."""
    from quotas.tasks import heal

    try:
        # ignore_result: nobody waits for it, and sending it then needs no result-backend subscription (which, with
        # Redis down, retries for 20 s and ends in a RuntimeError instead of failing fast)
        result = heal.apply_async((cluster.pk, broker.pk if broker is not None else None, actor.pk), ignore_result=True)
    except (kombu.exceptions.KombuError, redis.exceptions.RedisError, OSError) as e:
        where = f"broker {broker.broker_id}" if broker is not None else "the cluster-wide namespace"
        message = f"The task queue is unreachable: nothing was queued for {where} of {cluster.name!r}; try again. ({e})"
        raise ApiError("BROKER_NOT_AVAILABLE", message, {"retriable": True}, status_code=503) from e
    return str(result.id)


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
            "POST the same body to the `next` URL. Tenant members see only the entities their tenants own (every "
            "named part) and the `<default>` ones; admins and auditors see all."
        ),
        parameters=[
            CLUSTER_PARAM,
            OpenApiParameter("cursor", OpenApiTypes.STR, OpenApiParameter.QUERY, description="From `next`."),
            PAGE_SIZE_PARAM,
        ],
        request=DescribeRequestSerializer,
        responses={200: DescribePageSerializer, **LIST_ERRORS},
    )
    def post(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        query = DescribeRequestSerializer(data=request.data)
        query.is_valid(raise_exception=True)
        components = [FilterComponent(**c) for c in query.validated_data["components"]]
        entities = describe_client_quotas(target, components, query.validated_data["strict"])
        if not sees_everything(request.user):
            entities = entities.filter(pk__in=visible_entity_pks(request.user, entities))
        paginator = EntityCursorPagination()
        with memory_permits(page_estimate(paginator, request, DESCRIBE_ROW_BYTES)):
            page = paginator.paginate_queryset(entities, request, view=self)
            return paginator.get_paginated_response(DescribeEntrySerializer(page, many=True).data)


def visible_entity_pks(user: AbstractBaseUser, entities: QuerySet[Any]) -> list[int]:
    """The ids of the described entities a member may read (``quota_visible``).

    Ownership is by fnmatch pattern, which SQL cannot match portably: decided here over the filtered rows' names
    only, then the page is read by key (as SCRAM credentials are), so cursor pages stay full.
    """
    tenants = member_tenants(user)
    rows = entities.prefetch_related(None).order_by().values_list("pk", "user", "client_id", "ip")
    return [pk for pk, u, c, ip in rows.iterator(chunk_size=2000) if quota_visible(tenants, u, c, ip)]


def check_effective_scope(user: AbstractBaseUser, query: dict[str, Any]) -> None:
    """A member asks only about its tenants' connections: the answer shows the values of the entities it covers.

    403 PERMISSION_DENIED otherwise, as the monitor answers for another tenant's entity (ownership is decided from
    the question, so nothing about what exists leaks).
    """
    if "ip" in query:
        message = "Ip quotas belong to no tenant: admins and auditors read them; ask for a user and a client_id."
        raise ApiError("PERMISSION_DENIED", message, {"ip": [message]}, status_code=403)
    if not owned_by_any(member_tenants(user), query["user"], query["client_id"] or None):
        message = (
            f"None of your tenants owns the principal {query['user']!r} with the client-id {query['client_id']!r}; "
            "you read the effective quota of your tenants' principals and client-ids (GET /api/tenants/ lists them)."
        )
        raise ApiError("PERMISSION_DENIED", message, status_code=403)


class AlterClientQuotasView(APIView):
    """Kafka's AlterClientQuotas on the desired state (admins only), audited per changed key.

    Whole or nothing: every entry is validated first with the engine's rules, and if any is
    invalid the request fails with 400 INVALID_REQUEST (INVALID_BUDGET_SCOPE when every invalid
    entry asks for a budget scope its value cannot have), ``details.entries`` holding Kafka's
    per-entry answer (NONE or the error) and nothing is written. Kafka itself applies the
    valid entries of a batch; we do not, because the batch is one operator's (later: one
    approved request's) intended change, and a half-applied one would be pushed to every
    broker as a desired state nobody asked for. A valid batch is applied in one transaction
    that bumps the cluster's desired-state version and adds an audit entry (before, after,
    who) per changed key.
    """

    permission_classes = [permissions.IsAuthenticated, IsAdmin]
    parser_classes = [LenientJSONParser]

    @extend_schema(
        operation_id="alter_client_quotas",
        summary="Alter client quotas (Kafka's AlterClientQuotas), whole or nothing (admins)",
        description=(
            "Each op sets or removes one key of the entity. An op's `budget_scope` says what the value means: "
            "per_broker (a limit on each broker, Kafka's meaning) or cluster_wide (a budget for the sum over the "
            "cluster's brokers, which their budget plugin shares out; Kafka still holds the value, so "
            "kafka-configs.sh --describe shows it). cluster_wide is for producer_byte_rate, consumer_byte_rate and "
            "request_percentage of a Kafka cluster, at any user/client-id level; anything else is 400 "
            "INVALID_BUDGET_SCOPE naming what is allowed. Left out, a value keeps its scope (per_broker when new)."
        ),
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
                ops=[QuotaOp(o["key"], o["value"], o["remove"], o["budget_scope"]) for o in e["ops"]],
            )
            for e in body.validated_data["entries"]
        ]
        validate_only = body.validated_data["validate_only"]
        try:
            if validate_only:
                outcome = alter_client_quotas(target, entries, validate_only=True)
            else:
                outcome = audited_alter(target, entries, request.user)
        except AlterationRejected as e:
            details = {"entries": EntryResultSerializer(e.results, many=True).data}
            raise ApiError(e.code, e.message, details) from e
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
            "the ip itself (level 1) or the `<default>` ip (level 2). Tenant members ask only for a principal and "
            "client-id their tenants own (403 PERMISSION_DENIED otherwise, and for an ip)."
        ),
        parameters=[CLUSTER_PARAM, EffectiveQuerySerializer],
        responses={200: EffectiveResponseSerializer, **ERRORS},
    )
    def get(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        query = EffectiveQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q: dict[str, Any] = query.validated_data
        if not sees_everything(request.user):
            check_effective_scope(request.user, q)
        if "ip" in q:
            ip = normalize_ip(q["ip"])  # an invalid address is the engine's INVALID_REQUEST
            found = [effective_ip_quota(target, ip)]
            who = {"user": None, "client_id": None, "ip": ip}
        else:
            found = effective_client_quotas(target, q["user"], q["client_id"])
            who = {"user": q["user"], "client_id": q["client_id"], "ip": None}
        quotas = {e.key: EffectiveQuotaSerializer(e).data for e in found}
        return Response({"cluster": target.name, **who, "quotas": quotas})


# ------------------------------------------------------------------ broker and topic configs


class ConfigCursorPagination(DefaultCursorPagination):
    """Oldest config first, as they were added."""

    ordering = "pk"


class BrokerConfigsView(APIView):
    """A cluster's dynamic broker configs (connection limits, replication rates) and topic replica lists.

    POST is Kafka's IncrementalAlterConfigs for one resource, whole or nothing (admins): every op is judged
    by the engine, connection configs on the combined state after the change (default broker overlaid by
    each broker's own) against the cluster's listeners; a bad name or value answers 400 INVALID_CONFIG (as
    Kafka does), a malformed request 400 INVALID_REQUEST, and nothing is written. An accepted batch that
    changes something bumps the cluster's desired-state version once and is audited per changed key.
    """

    permission_classes = [permissions.IsAuthenticated, IsAdminOrReadOnly]
    parser_classes = [LenientJSONParser]

    @extend_schema(
        operation_id="list_broker_configs",
        summary="List stored broker configs (resource_type=broker) or topic configs (resource_type=topic)",
        parameters=[
            CLUSTER_PARAM,
            OpenApiParameter(
                "resource_type", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=["broker", "topic"], default="broker"
            ),
            OpenApiParameter(
                "broker", OpenApiTypes.STR, OpenApiParameter.QUERY, description="A broker id, or 'default'."
            ),
            OpenApiParameter("topic", OpenApiTypes.STR, OpenApiParameter.QUERY, description="A topic name."),
            OpenApiParameter("cursor", OpenApiTypes.STR, OpenApiParameter.QUERY, description="From `next`."),
            PAGE_SIZE_PARAM,
        ],
        responses={200: ConfigPageSerializer, **LIST_ERRORS},
    )
    def get(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        params = request.query_params
        kind = params.get("resource_type", "broker")
        rows: QuerySet[Any]
        if kind == "topic":
            rows = TopicConfig.objects.filter(cluster=target)
            if params.get("topic"):
                rows = rows.filter(topic=params["topic"])
        elif kind == "broker":
            rows = BrokerConfig.objects.filter(cluster=target).select_related("broker")
            broker = params.get("broker")
            if broker == "default":
                rows = rows.filter(broker__isnull=True)
            elif broker:
                if not broker.isdigit():
                    raise ApiError("INVALID_REQUEST", f"broker must be a broker id or 'default', got {broker!r}.")
                rows = rows.filter(broker__broker_id=int(broker))
        else:
            raise ApiError("INVALID_REQUEST", f"resource_type must be broker or topic, got {kind!r}.")
        paginator = ConfigCursorPagination()
        with memory_permits(page_estimate(paginator, request, CONFIG_ROW_BYTES)):
            page = paginator.paginate_queryset(rows, request, view=self)
            return paginator.get_paginated_response(ConfigEntrySerializer(page, many=True).data)

    @extend_schema(
        operation_id="alter_broker_configs",
        summary="Alter broker or topic configs (Kafka's IncrementalAlterConfigs), whole or nothing (admins)",
        parameters=[CLUSTER_PARAM],
        request=AlterConfigsRequestSerializer,
        responses={200: AlterConfigsResponseSerializer, **ERRORS},
    )
    def post(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        body = AlterConfigsRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        resource = ConfigResource(broker_id=data["resource"].get("broker"), topic=data["resource"].get("topic"))
        ops = [ConfigOp(o["key"], o["value"], o["op"]) for o in data["ops"]]
        try:
            outcome = alter_configs(target, resource, ops, request.user, validate_only=data["validate_only"])
        except InvalidConfig as e:
            raise ApiError(e.code, e.message, {"resource": e.resource, "key": e.key}) from e
        return Response(AlterConfigsResponseSerializer((resource, outcome, data["validate_only"])).data)


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


# ------------------------------------------------------------------ pushes and drift


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


# ------------------------------------------------------------------ tenants, requests, audit

SCOPED_ERRORS = {**ERRORS, 409: ErrorSerializer}


@extend_schema_view(
    list=extend_schema(summary="List tenants (members see their own)"),
    retrieve=extend_schema(summary="A tenant", responses={200: TenantSerializer, 404: ErrorSerializer}),
    create=extend_schema(summary="Add a tenant (admins)", responses={201: TenantSerializer, **ERRORS}),
    update=extend_schema(summary="Change a tenant (admins)", responses={200: TenantSerializer, **ERRORS}),
    partial_update=extend_schema(summary="Change some fields of a tenant (admins)", responses={200: TenantSerializer}),
    destroy=extend_schema(summary="Delete a tenant without requests (admins)", responses={204: None, **SCOPED_ERRORS}),
)
class TenantViewSet(viewsets.ModelViewSet):
    """Tenants by name. Admins and auditors read all, a member reads its own; only admins write."""

    serializer_class = TenantSerializer
    permission_classes = [permissions.IsAuthenticated, IsAdminOrReadOnly]
    lookup_field = "name"
    lookup_value_regex = r"[A-Za-z0-9][A-Za-z0-9_-]*"

    def get_queryset(self) -> QuerySet[Tenant]:
        user = self.request.user
        tenants = Tenant.objects.all() if sees_everything(user) else tenants_of(user)
        return tenants.prefetch_related("members", "owned_names")

    def perform_destroy(self, instance: Tenant) -> None:
        """Requests keep their tenant (the audit trail names it), so a tenant with requests stays."""
        try:
            instance.delete()
        except ProtectedError:
            message = f"Tenant {instance.name!r} has quota requests; they and their audit trail keep it."
            raise ApiError("CONFLICT", message, status_code=409) from None


REQUEST_FILTERS = [
    OpenApiParameter("state", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=RequestState.values),
    OpenApiParameter("tenant", OpenApiTypes.STR, OpenApiParameter.QUERY, description="A tenant's name."),
    OpenApiParameter("cluster", OpenApiTypes.STR, OpenApiParameter.QUERY, description="A cluster's name."),
]


@extend_schema_view(
    list=extend_schema(
        summary="List quota requests you may see",
        parameters=REQUEST_FILTERS,
        responses={200: QuotaRequestSerializer(many=True), 503: ErrorSerializer},
    ),
    retrieve=extend_schema(
        summary="A quota request, with the capacity check an approver decides on",
        responses={200: QuotaRequestDetailSerializer, 404: ErrorSerializer},
    ),
)
class QuotaRequestViewSet(
    MemoryBoundedListMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Self-service quota requests: submit (create), withdraw, approve, reject. The rules are ``quotas.workflow``'s."""

    row_bytes = REQUEST_ROW_BYTES

    serializer_class = QuotaRequestSerializer
    permission_classes = [permissions.IsAuthenticated]
    lookup_value_regex = r"[0-9]+"

    def get_queryset(self) -> QuerySet[QuotaRequest]:
        user = self.request.user
        requests = QuotaRequest.objects.select_related("tenant", "cluster", "requested_by", "approval__approver")
        if not sees_everything(user):
            requests = requests.filter(tenant__in=tenants_of(user))
        params = self.request.query_params
        for name, column in (("state", "state"), ("tenant", "tenant__name"), ("cluster", "cluster__name")):
            if params.get(name):
                requests = requests.filter(**{column: params[name]})
        return requests

    def get_serializer_class(self) -> type[QuotaRequestSerializer]:
        return QuotaRequestDetailSerializer if self.action == "retrieve" else QuotaRequestSerializer

    def _answer(self, request_id: int, code: int = status.HTTP_200_OK) -> Response:
        fresh = (
            self.get_queryset()
            .model.objects.select_related("tenant", "cluster", "requested_by", "approval__approver")
            .get(pk=request_id)
        )
        return Response(QuotaRequestSerializer(fresh).data, status=code)

    @extend_schema(
        summary="Submit a quota request (a member of the tenant)",
        description=(
            "The entity must be owned by the tenant (its principal and client-id patterns); the value is judged by "
            "Kafka's rules now. `tenant` may be left out by a member of one tenant; a member of several names one "
            "(400 INVALID_REQUEST naming the choices otherwise). `value` is a number or text with a unit: byte rates "
            "as 1572864, 1536 KiB/s, 1.5 MiB/s or 2 GiB/s (binary units), stored as whole bytes/s; other text is "
            "400 INVALID_REQUEST naming the accepted forms. `expires_at` makes it a boost: at expiry the previous "
            "value comes back on its own; overlapping boosts of one entity stack, and the last to end gives back the "
            "value from before the first. `budget_scope` asks for a cluster-wide budget (the sum over the brokers) "
            "or a per-broker value; left out, the request keeps the scope the value has, and says which it recorded "
            "(400 INVALID_BUDGET_SCOPE, details.budget_scope, for a scope the value cannot have)."
        ),
        request=QuotaRequestCreateSerializer,
        responses={201: QuotaRequestSerializer, **ERRORS},
    )
    def create(self, request: Request) -> Response:
        body = QuotaRequestCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        created = quota_requests.submit(
            request.user,
            data["tenant"],
            data["cluster"],
            user=data["user"],
            client_id=data["client_id"],
            key=data["key"],
            value=data["value"],
            reason=data["reason"],
            expires_at=data["expires_at"],
            budget_scope=data["budget_scope"],
        )
        return self._answer(created.pk, status.HTTP_201_CREATED)

    def _decide(self, request: Request, transition: Any, body_type: type[DecisionSerializer] = DecisionSerializer
                ) -> Response:
        target = self.get_object()  # 404 for a request the caller may not see
        body = body_type(data=request.data)
        body.is_valid(raise_exception=True)
        transition(request.user, target.pk, **body.validated_data)
        return self._answer(target.pk)

    @extend_schema(
        summary="Withdraw a request nobody decided yet (the requester or a member of its tenant)",
        request=DecisionSerializer,
        responses={200: QuotaRequestSerializer, **SCOPED_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str) -> Response:
        return self._decide(request, quota_requests.withdraw)

    @extend_schema(
        summary="Approve and apply to the desired state (admins; never one's own request)",
        description="Exactly one decision counts: a request already decided answers 409 CONFLICT. A request whose "
        "value moved on since it was submitted (its `stale`: another approval, a boost, an adopted change) answers "
        "409 STALE_REQUEST, saying what it was submitted against, what it is now and what changed it (`details`), "
        "and changes nothing: send `confirm_stale: true` to approve it anyway, or reject it as superseded.",
        request=ApproveSerializer,
        responses={200: QuotaRequestSerializer, **SCOPED_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        return self._decide(request, quota_requests.approve, ApproveSerializer)

    @extend_schema(
        summary="Reject, saying why in the comment (admins; never one's own request)",
        description="`superseded: true` rejects a request whose value moved on since it was submitted, recording "
        "the reason (`approval.decision_reason`) and what changed in the comment; the comment is optional then. "
        "400 INVALID_REQUEST when the value did not move.",
        request=RejectSerializer,
        responses={200: QuotaRequestSerializer, **SCOPED_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        return self._decide(request, quota_requests.reject, RejectSerializer)


@extend_schema_view(
    list=extend_schema(
        summary="The audit trail, newest first (admins and auditors: all; members: their tenants')",
        parameters=[
            id_param("request", "A request's id."),
            OpenApiParameter("tenant", OpenApiTypes.STR, OpenApiParameter.QUERY, description="A tenant's name."),
        ],
        responses={200: AuditEntrySerializer(many=True), 503: ErrorSerializer},
    )
)
class AuditEntryViewSet(MemoryBoundedListMixin, mixins.ListModelMixin, viewsets.GenericViewSet):
    """Every change, with before and after, who and when. Read-only for everyone."""

    row_bytes = AUDIT_ROW_BYTES

    serializer_class = AuditEntrySerializer
    permission_classes = [permissions.IsAuthenticated]

    def get_queryset(self) -> QuerySet[AuditEntry]:
        user = self.request.user
        entries = AuditEntry.objects.select_related("tenant", "cluster")
        if not sees_everything(user):
            entries = entries.filter(tenant__in=tenants_of(user))
        params = self.request.query_params
        request_id = read_id(params, "request")
        if request_id is not None:
            entries = entries.filter(request_id=request_id)
        if params.get("tenant"):
            entries = entries.filter(tenant__name=params["tenant"])
        return entries
