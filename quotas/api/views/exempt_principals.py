"""A Kafka cluster's exempt principals: principals no quota applies to (replicators, the portal's own user).

``/api/clusters/<name>/exempt-principals/`` lists them (everyone authenticated: a tenant member needs to know why one
of its principals is never throttled, and a principal's name says nothing of another tenant's quotas) and adds one
(admins); ``.../exempt-principals/<principal>/`` removes one (admins). Each change is
``quotas.models.group_changes.set_exempt``'s: one desired-state version pushed to the brokers' quota callback,
audited (``exempt_changed``).
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import permissions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.errors import ApiError, ErrorSerializer
from portal.api.pagination import PAGE_SIZE_PARAM, DefaultCursorPagination
from quotas.api.memory import memory_permits
from quotas.api.parsers import LenientJSONParser
from quotas.api.permissions import IsAdmin, IsAdminOrReadOnly
from quotas.api.serializers.exempt_principals import (
    ExemptCreateSerializer,
    ExemptPrincipalPageSerializer,
    ExemptPrincipalSerializer,
)
from quotas.api.views.base import CLUSTER_PARAM, ERRORS, LIST_ERRORS, get_cluster, page_estimate
from quotas.models import ExemptPrincipal, set_exempt

EXEMPT_ROW_BYTES = 2 << 10  # a principal, its reason and creator
PRINCIPAL_PARAM = OpenApiParameter("principal", OpenApiTypes.STR, OpenApiParameter.PATH,
                                   description="The exempt principal's name.")


class ExemptCursorPagination(DefaultCursorPagination):
    ordering = "principal"


class ExemptPrincipalListView(APIView):
    """A cluster's exempt principals: list (everyone authenticated), add (admins)."""

    permission_classes = [permissions.IsAuthenticated, IsAdminOrReadOnly]
    parser_classes = [LenientJSONParser]

    @extend_schema(
        operation_id="list_exempt_principals",
        summary="List the principals no quota applies to on a cluster (everyone authenticated)",
        description="Members read them too: an exempt principal is never throttled, whatever its quotas, groups or "
        "Kafka's defaults say, and this list is where a member learns why.",
        parameters=[
            CLUSTER_PARAM,
            OpenApiParameter("cursor", OpenApiTypes.STR, OpenApiParameter.QUERY, description="From `next`."),
            PAGE_SIZE_PARAM,
        ],
        responses={200: ExemptPrincipalPageSerializer, **LIST_ERRORS},
    )
    def get(self, request: Request, cluster: str) -> Response:
        rows = ExemptPrincipal.objects.filter(cluster=get_cluster(cluster)).select_related("cluster", "created_by")
        paginator = ExemptCursorPagination()
        with memory_permits(page_estimate(paginator, request, EXEMPT_ROW_BYTES)):
            page = paginator.paginate_queryset(rows, request, view=self)
            return paginator.get_paginated_response(ExemptPrincipalSerializer(page, many=True).data)

    @extend_schema(
        operation_id="create_exempt_principal",
        summary="Exempt a principal from every quota of a Kafka cluster (admins)",
        description="Kafka clusters only (the brokers' quota callback reads the list; an engine cluster is 400 "
        "INVALID_GROUP, details.cluster). A principal already exempt answers 409 CONFLICT. One desired-state "
        "version, audited as exempt_changed with the reason.",
        parameters=[CLUSTER_PARAM],
        request=ExemptCreateSerializer,
        examples=[OpenApiExample("A replicator", request_only=True,
                                 value={"principal": "mm2-replicator", "reason": "MirrorMaker 2 to the DR cluster"})],
        responses={201: ExemptPrincipalSerializer, **ERRORS, 409: ErrorSerializer},
    )
    def post(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        body = ExemptCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if not set_exempt(request.user, target, data["principal"], True, data["reason"]):
            message = f"{data['principal']} is exempt on {target.name} already; DELETE it first to change the reason."
            raise ApiError("CONFLICT", message, status_code=409)
        row = ExemptPrincipal.objects.select_related("cluster", "created_by").get(
            cluster=target, principal=data["principal"]
        )
        return Response(ExemptPrincipalSerializer(row).data, status=status.HTTP_201_CREATED)


class ExemptPrincipalDetailView(APIView):
    """One exempt principal: removed (admins); its quotas apply to it again."""

    permission_classes = [permissions.IsAuthenticated, IsAdmin]

    @extend_schema(
        operation_id="delete_exempt_principal",
        summary="Stop exempting a principal (admins): its quotas, groups and defaults apply again",
        parameters=[CLUSTER_PARAM, PRINCIPAL_PARAM],
        responses={204: None, **ERRORS},
    )
    def delete(self, request: Request, cluster: str, principal: str) -> Response:
        target = get_cluster(cluster)
        if not set_exempt(request.user, target, principal, False):
            listed = f"/api/clusters/{target.name}/exempt-principals/"
            message = f"{principal!r} is not exempt on {target.name}; GET {listed} lists those that are."
            raise ApiError("NOT_FOUND", message, status_code=404)
        return Response(status=status.HTTP_204_NO_CONTENT)
