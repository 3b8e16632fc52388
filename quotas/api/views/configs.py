"""A cluster's dynamic broker configs and topic replica lists."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.errors import ApiError
from portal.api.pagination import PAGE_SIZE_PARAM, DefaultCursorPagination
from quotas.api.memory import memory_permits
from quotas.api.parsers import LenientJSONParser
from quotas.api.permissions import IsAdminOrReadOnly
from quotas.api.serializers.configs import (
    AlterConfigsRequestSerializer,
    AlterConfigsResponseSerializer,
    ConfigEntrySerializer,
    ConfigPageSerializer,
)
from quotas.api.views.base import CLUSTER_PARAM, CONFIG_ROW_BYTES, ERRORS, LIST_ERRORS, get_cluster, page_estimate
from quotas.models import BrokerConfig, ConfigOp, ConfigResource, InvalidConfig, TopicConfig, alter_configs


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
