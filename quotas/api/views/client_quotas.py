"""Kafka's client-quota operations on a cluster's desired state: describe, alter, and the effective quota."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from engine.connections import normalize_ip
from portal.api.errors import ApiError
from portal.api.pagination import PAGE_SIZE_PARAM, DefaultCursorPagination
from quotas.api.memory import memory_permits
from quotas.api.parsers import LenientJSONParser
from quotas.api.permissions import IsAdmin
from quotas.api.serializers.client_quotas import (
    AlterRequestSerializer,
    AlterResponseSerializer,
    DescribeEntrySerializer,
    DescribePageSerializer,
    DescribeRequestSerializer,
    EffectiveQuerySerializer,
    EffectiveQuotaSerializer,
    EffectiveResponseSerializer,
    EntryResultSerializer,
)
from quotas.api.views.base import CLUSTER_PARAM, DESCRIBE_ROW_BYTES, ERRORS, LIST_ERRORS, get_cluster, page_estimate
from quotas.models import (
    Alteration,
    AlterationRejected,
    FilterComponent,
    QuotaOp,
    alter_client_quotas,
    audited_alter,
    describe_client_quotas,
    effective_client_quotas,
    effective_ip_quota,
    sees_everything,
)
from quotas.models.tenants import member_tenants, owned_by_any
from quotas.queries import visible_entity_pks


class EntityCursorPagination(DefaultCursorPagination):
    """Oldest entity first, so a describe reads as the quotas were added."""

    ordering = "pk"


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
            "supplied it, and the more specific levels that hold nothing. A group's value applies when no level "
            "naming the client holds one (`group`, entity `/groups/<name>`, level null, `beaten`: the defaults it "
            "won over); an exempt principal gets no quota at all (`exempt`: true). For ip: "
            "connection_creation_rate from the ip itself (level 1) or the `<default>` ip (level 2). Tenant members "
            "ask only for a principal and "
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
