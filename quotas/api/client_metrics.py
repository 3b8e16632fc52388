"""KIP-714 client-metrics subscriptions of a cluster, and tenants' requests for them (serializers and views).

``/api/clusters/<name>/client-metrics/`` lists (everyone authenticated) and creates (admins) subscriptions;
``.../client-metrics/<sub>/`` reads, replaces (PUT), changes some configs (PATCH) or deletes one (admins). Every
write goes through ``quotas.models.alter_subscription``: Kafka's ClientMetricsConfigs rules (a refused config
answers 400 with Kafka's code and message and changes nothing), one new desired-state version pushed to every
broker, audited. Tenants ask through ``/api/subscription-requests/`` (submit, withdraw, approve, reject), with the
rules of ``quotas.workflow``.

Who reads what: a subscription is cluster configuration like broker configs, and its match names client-ids
only as patterns, so every authenticated user reads every subscription of a cluster (a member needs to see
which names are taken and what already selects its clients). Subscription requests are scoped like quota
requests: admins and auditors see all, members their tenants'.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.errors import ApiError, ErrorSerializer, unknown_name
from portal.api.pagination import PAGE_SIZE_PARAM, DefaultCursorPagination
from quotas.api.memory import memory_permits
from quotas.api.params import int_schema
from quotas.api.parsers import LenientJSONParser
from quotas.api.permissions import IsAdminOrReadOnly
from quotas.api.serializers.fields import TEXT_MAX, check_kafka_string
from quotas.api.serializers.pushes import PushSerializer
from quotas.api.serializers.requests import DecisionSerializer
from quotas.api.views.base import CLUSTER_PARAM, ERRORS, LIST_ERRORS, MemoryBoundedListMixin, get_cluster, page_estimate
from quotas.models import (
    ClientMetricsSubscription,
    Cluster,
    Push,
    RequestState,
    SubscriptionExists,
    SubscriptionNotFound,
    SubscriptionRequest,
    Tenant,
    alter_subscription,
    sees_everything,
    tenants_of,
)
from quotas.models.client_metrics import INTERVAL, MATCH, METRICS, NAME_MAX
from quotas.queries import visible_subscriptions
from quotas.workflow import subscription_requests

SUBSCRIPTION_ROW_BYTES = 4 << 10  # a subscription: name, metric prefixes and match patterns (as configs)
SUBSCRIPTION_REQUEST_ROW_BYTES = 6 << 10  # a request, its tenant, cluster, requester and decider
SCOPED_ERRORS = {**ERRORS, 409: ErrorSerializer}


# ------------------------------------------------------------------ serializers


class ClientMetricsSubscriptionSerializer(serializers.ModelSerializer):
    """A subscription as stored; ``configs`` is what the brokers hold (Kafka's key names; empty values left out)."""

    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    path = serializers.CharField(read_only=True, help_text="/config/client-metrics/<name>")
    configs = serializers.DictField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = ClientMetricsSubscription
        fields = ["cluster", "name", "path", "metrics", "interval_ms", "match", "configs", "created", "updated"]
        read_only_fields = fields


@extend_schema_field(
    {
        "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
        "description": "Comma-separated text, or a list of entries.",
    }
)
class ListOrTextField(serializers.Field):
    """A Kafka LIST config as text (``a,b``) or a JSON list (``["a", "b"]``); anything else goes to Kafka's rules."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, list) and all(isinstance(x, str) for x in data):
            return ",".join(data)
        return data

    def to_representation(self, value: Any) -> Any:
        return value


# Kafka's INT configs (interval.ms: 100..3600000 is Kafka's own check, with its message)
@extend_schema_field({"oneOf": [int_schema(-(2**31), 2**31 - 1), {"type": "string"}]})
class PassThroughField(serializers.Field):
    """A value exactly as sent: Kafka's rules judge it (so ``"abc"`` is refused with Kafka's message)."""

    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class SubscriptionBodySerializer(serializers.Serializer):
    """The subscription's configs: the three fields, or ``configs`` with Kafka's key names (not both).

    ``configs`` is passed whole to Kafka's rules, so an unknown key is refused with Kafka's message.
    On PUT and POST a config left out gets Kafka's default; on PATCH it keeps its current value.
    """

    metrics = ListOrTextField(required=False, help_text="Metric-name prefixes, '*' = all; empty = none.")
    interval_ms = PassThroughField(required=False, help_text="Push interval in ms, 100..3600000 (default 300000).")
    match = ListOrTextField(
        required=False,
        help_text="key=regex selectors (client_id, client_software_name, client_software_version, "
        "client_source_address, client_source_port, client_instance_id); empty = every client.",
    )
    configs = serializers.DictField(
        child=PassThroughField(),
        required=False,
        help_text='Kafka\'s form: {"metrics": ..., "interval.ms": ..., "match": ...}.',
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        named = {
            k: attrs[f] for f, k in (("metrics", METRICS), ("interval_ms", INTERVAL), ("match", MATCH)) if f in attrs
        }
        if "configs" in attrs:
            if named:
                raise serializers.ValidationError("Give either configs or metrics/interval_ms/match, not both.")
            configs = attrs["configs"]
            named = {k: ",".join(v) if isinstance(v, list) else v for k, v in configs.items()}
        for key, value in named.items():  # each is a Kafka config value: a protocol STRING
            try:
                check_kafka_string(value)
            except serializers.ValidationError as e:
                raise serializers.ValidationError({key: e.detail}) from e
        return {"configs": named}


class SubscriptionCreateSerializer(SubscriptionBodySerializer):
    name = serializers.CharField(max_length=NAME_MAX, help_text="The subscription's name (Kafka's resource name).")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return {"name": attrs["name"], **super().validate(attrs)}


class ChangeSerializer(serializers.Serializer):
    key = serializers.CharField()
    before = serializers.CharField(allow_null=True, help_text="null = not set (Kafka's default).")
    after = serializers.CharField(allow_null=True, help_text="null = removed (Kafka's default).")


class SubscriptionChangeSerializer(serializers.Serializer):
    """What a write did: the subscription after it (null when deleted), the changed keys and the version."""

    subscription = ClientMetricsSubscriptionSerializer(allow_null=True)
    changed = serializers.BooleanField()
    version = serializers.IntegerField(help_text="The cluster's desired-state version after the change.")
    changes = ChangeSerializer(many=True)


def _change_body(outcome: Any) -> dict[str, Any]:
    sub = outcome.subscription
    return {
        "subscription": ClientMetricsSubscriptionSerializer(sub).data if sub is not None else None,
        "changed": outcome.changed,
        "version": outcome.version,
        "changes": [{"key": k, "before": b, "after": a} for k, b, a in outcome.changes],
    }


class SubscriptionRequestSerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    path = serializers.CharField(read_only=True)
    configs = serializers.DictField(
        child=serializers.CharField(), read_only=True, allow_null=True, help_text="null: a delete request."
    )
    pushes = serializers.SerializerMethodField()

    class Meta:
        model = SubscriptionRequest
        fields = [
            "id",
            "tenant",
            "cluster",
            "requested_by",
            "name",
            "path",
            "operation",
            "metrics",
            "interval_ms",
            "match",
            "configs",
            "reason",
            "state",
            "decided_by",
            "decision_comment",
            "decided_at",
            "applied_version",
            "failure",
            "pushes",
            "created",
            "updated",
        ]
        read_only_fields = fields

    @extend_schema_field(PushSerializer(many=True))
    def get_pushes(self, obj: SubscriptionRequest) -> list[dict[str, Any]]:
        if obj.applied_version is None:
            return []
        rows = Push.objects.filter(cluster_id=obj.cluster_id, version=obj.applied_version).select_related(
            "cluster", "broker"
        )
        ordered = sorted(rows, key=lambda p: -1 if p.broker is None else p.broker.broker_id)
        return PushSerializer(ordered, many=True).data


class SubscriptionRequestCreateSerializer(SubscriptionBodySerializer):
    """Ask for a subscription (``operation`` set: create or replace) or for its removal (``delete``)."""

    tenant = serializers.SlugRelatedField(
        slug_field="name",
        queryset=Tenant.objects.all(),
        required=False,
        allow_null=True,
        default=None,
        error_messages=unknown_name("tenant", "/api/tenants/"),
        help_text="Your tenant; leave it out when you are a member of one tenant only (a member of several names one).",
    )
    cluster = serializers.SlugRelatedField(
        slug_field="name", queryset=Cluster.objects.all(), error_messages=unknown_name("cluster", "/api/clusters/")
    )
    name = serializers.CharField(max_length=NAME_MAX)
    operation = serializers.ChoiceField(choices=["set", "delete"], default="set")
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=TEXT_MAX)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        keep = {k: attrs[k] for k in ("tenant", "cluster", "name", "operation", "reason")}
        return {**keep, **super().validate(attrs)}


# ------------------------------------------------------------------ subscriptions


class SubscriptionCursorPagination(DefaultCursorPagination):
    ordering = "name"


class SubscriptionPageSerializer(serializers.Serializer):
    """One page of the list, as the cursor paginator answers it (the schema said a bare array: it is not one)."""

    next = serializers.URLField(allow_null=True, help_text="The next page, or null on the last one.")
    previous = serializers.URLField(allow_null=True, help_text="The page before, or null on the first one.")
    results = ClientMetricsSubscriptionSerializer(many=True)


SUB_PARAM = OpenApiParameter("subscription", OpenApiTypes.STR, OpenApiParameter.PATH, description="Its name.")


def _write(cluster: Cluster, name: str, configs: dict[str, Any] | None, user: Any, **kw: Any) -> Any:
    try:
        return alter_subscription(cluster, name, configs, user, **kw)
    except SubscriptionNotFound as e:
        raise ApiError("NOT_FOUND", e.message, status_code=404) from e
    except SubscriptionExists as e:
        raise ApiError("CONFLICT", e.message + " PUT or PATCH it to change it.", status_code=409) from e


class ClientMetricsListView(APIView):
    """A cluster's client-metrics subscriptions (everyone authenticated reads; admins create)."""

    permission_classes = [permissions.IsAuthenticated, IsAdminOrReadOnly]
    parser_classes = [LenientJSONParser]

    @extend_schema(
        operation_id="list_client_metrics",
        summary="List a cluster's client-metrics subscriptions (KIP-714), by name",
        parameters=[
            CLUSTER_PARAM,
            OpenApiParameter("cursor", OpenApiTypes.STR, OpenApiParameter.QUERY, description="From `next`."),
            PAGE_SIZE_PARAM,
        ],
        responses={200: SubscriptionPageSerializer, **LIST_ERRORS},
    )
    def get(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        rows = visible_subscriptions(request.user, ClientMetricsSubscription.objects.filter(cluster=target))
        paginator = SubscriptionCursorPagination()
        with memory_permits(page_estimate(paginator, request, SUBSCRIPTION_ROW_BYTES)):
            page = paginator.paginate_queryset(rows, request, view=self)
            return paginator.get_paginated_response(ClientMetricsSubscriptionSerializer(page, many=True).data)

    @extend_schema(
        operation_id="create_client_metrics",
        summary="Create a client-metrics subscription (admins); pushed to every broker",
        description=(
            "Judged by Kafka's ClientMetricsConfigs rules (keys metrics, interval.ms, match; interval.ms in "
            "[100, 3600000]; match entries key=regex on client_id, client_software_name, client_software_version, "
            "client_source_address, client_source_port, client_instance_id). A refused config answers 400 with "
            "Kafka's message and nothing changes; an existing name answers 409 CONFLICT."
        ),
        parameters=[CLUSTER_PARAM],
        request=SubscriptionCreateSerializer,
        responses={201: SubscriptionChangeSerializer, **SCOPED_ERRORS},
    )
    def post(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        body = SubscriptionCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        outcome = _write(target, data["name"], data["configs"], request.user, create_only=True)
        return Response(_change_body(outcome), status=status.HTTP_201_CREATED)


class ClientMetricsDetailView(APIView):
    """One subscription: read (everyone authenticated), replace, change or delete (admins)."""

    permission_classes = [permissions.IsAuthenticated, IsAdminOrReadOnly]
    parser_classes = [LenientJSONParser]

    def _row(self, cluster: Cluster, name: str) -> ClientMetricsSubscription:
        row = ClientMetricsSubscription.objects.filter(cluster=cluster, name=name).select_related("cluster").first()
        if row is None:
            message = f"Cluster {cluster.name!r} has no client-metrics subscription {name!r}."
            raise ApiError("NOT_FOUND", message, status_code=404)
        return row

    @extend_schema(
        operation_id="get_client_metrics",
        summary="A client-metrics subscription",
        parameters=[CLUSTER_PARAM, SUB_PARAM],
        responses={200: ClientMetricsSubscriptionSerializer, **ERRORS},
    )
    def get(self, request: Request, cluster: str, subscription: str) -> Response:
        row = self._row(get_cluster(cluster), subscription)
        if not visible_subscriptions(request.user, ClientMetricsSubscription.objects.filter(pk=row.pk)).exists():
            message = f"Cluster {cluster!r} has no client-metrics subscription {subscription!r} you may read."
            raise ApiError("NOT_FOUND", message, status_code=404)
        return Response(ClientMetricsSubscriptionSerializer(row).data)

    @extend_schema(
        operation_id="replace_client_metrics",
        summary="Replace a subscription's configs (admins); a config left out gets Kafka's default",
        parameters=[CLUSTER_PARAM, SUB_PARAM],
        request=SubscriptionBodySerializer,
        responses={200: SubscriptionChangeSerializer, **ERRORS},
    )
    def put(self, request: Request, cluster: str, subscription: str) -> Response:
        target = get_cluster(cluster)
        body = SubscriptionBodySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        outcome = _write(target, subscription, body.validated_data["configs"], request.user, update_only=True)
        return Response(_change_body(outcome))

    @extend_schema(
        operation_id="patch_client_metrics",
        summary="Change some of a subscription's configs (admins); the others keep their values",
        parameters=[CLUSTER_PARAM, SUB_PARAM],
        request=SubscriptionBodySerializer,
        responses={200: SubscriptionChangeSerializer, **ERRORS},
    )
    def patch(self, request: Request, cluster: str, subscription: str) -> Response:
        target = get_cluster(cluster)
        row = self._row(target, subscription)
        body = SubscriptionBodySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        current = {METRICS: row.metrics, INTERVAL: str(row.interval_ms), MATCH: row.match}
        configs = {**current, **body.validated_data["configs"]}
        outcome = _write(target, subscription, configs, request.user, update_only=True)
        return Response(_change_body(outcome))

    @extend_schema(
        operation_id="delete_client_metrics",
        summary="Delete a subscription (admins); removed from every broker",
        parameters=[CLUSTER_PARAM, SUB_PARAM],
        responses={200: SubscriptionChangeSerializer, **ERRORS},
    )
    def delete(self, request: Request, cluster: str, subscription: str) -> Response:
        outcome = _write(get_cluster(cluster), subscription, None, request.user)
        return Response(_change_body(outcome))


# ------------------------------------------------------------------ tenants' requests


@extend_schema_view(
    list=extend_schema(
        summary="List subscription requests you may see",
        parameters=[
            OpenApiParameter("state", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=RequestState.values),
            OpenApiParameter("tenant", OpenApiTypes.STR, OpenApiParameter.QUERY),
            OpenApiParameter("cluster", OpenApiTypes.STR, OpenApiParameter.QUERY),
        ],
        responses={200: SubscriptionRequestSerializer(many=True), 503: ErrorSerializer},
    ),
    retrieve=extend_schema(
        summary="A subscription request, with the push of its version to each broker",
        responses={200: SubscriptionRequestSerializer, 404: ErrorSerializer},
    ),
)
class SubscriptionRequestViewSet(
    MemoryBoundedListMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Tenants' client-metrics subscription requests: submit (create), withdraw, approve, reject."""

    row_bytes = SUBSCRIPTION_REQUEST_ROW_BYTES
    serializer_class = SubscriptionRequestSerializer
    permission_classes = [permissions.IsAuthenticated]
    parser_classes = [LenientJSONParser]
    lookup_value_regex = r"[0-9]+"

    def get_queryset(self) -> QuerySet[SubscriptionRequest]:
        user = self.request.user
        rows = SubscriptionRequest.objects.select_related("tenant", "cluster", "requested_by", "decided_by")
        if not sees_everything(user):
            rows = rows.filter(tenant__in=tenants_of(user))
        params = self.request.query_params
        for name, column in (("state", "state"), ("tenant", "tenant__name"), ("cluster", "cluster__name")):
            if params.get(name):
                rows = rows.filter(**{column: params[name]})
        return rows

    def _answer(self, pk: int, code: int = status.HTTP_200_OK) -> Response:
        fresh = SubscriptionRequest.objects.select_related("tenant", "cluster", "requested_by", "decided_by").get(pk=pk)
        return Response(SubscriptionRequestSerializer(fresh).data, status=code)

    @extend_schema(
        summary="Ask for a client-metrics subscription, or its removal (a member of the tenant)",
        description=(
            "Kafka's rules judge the configs now. `tenant` may be left out by a member of one tenant; a member of "
            "several names one. The match must select only the tenant's own clients: a "
            "client_id entry that is a literal client-id the tenant owns, or '<prefix>.*' inside one of its "
            "'<prefix>*' patterns; other selectors only narrow it. Replacing or deleting an existing subscription "
            "needs its current match to be the tenant's too."
        ),
        request=SubscriptionRequestCreateSerializer,
        responses={201: SubscriptionRequestSerializer, **ERRORS},
    )
    def create(self, request: Request) -> Response:
        body = SubscriptionRequestCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        created = subscription_requests.submit_subscription(
            request.user,
            data["tenant"],
            data["cluster"],
            name=data["name"],
            configs=None if data["operation"] == "delete" else data["configs"],
            reason=data["reason"],
        )
        return self._answer(created.pk, status.HTTP_201_CREATED)

    def _decide(self, request: Request, transition: Any) -> Response:
        target = self.get_object()
        body = DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        transition(request.user, target.pk, body.validated_data["comment"])
        return self._answer(target.pk)

    @extend_schema(
        summary="Withdraw an undecided subscription request",
        request=DecisionSerializer,
        responses={200: SubscriptionRequestSerializer, **SCOPED_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str) -> Response:
        return self._decide(request, subscription_requests.withdraw_subscription)

    @extend_schema(
        summary="Approve and apply (admins; never one's own request)",
        description="Exactly one decision counts: a request already decided answers 409 CONFLICT.",
        request=DecisionSerializer,
        responses={200: SubscriptionRequestSerializer, **SCOPED_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        return self._decide(request, subscription_requests.approve_subscription)

    @extend_schema(
        summary="Reject, saying why (admins; never one's own request)",
        request=DecisionSerializer,
        responses={200: SubscriptionRequestSerializer, **SCOPED_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        return self._decide(request, subscription_requests.reject_subscription)
