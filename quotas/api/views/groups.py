"""Group quotas of a Kafka cluster: list, create, read, change members, delete, and set values (admins write).

``/api/clusters/<name>/groups/`` lists the groups (admins and auditors: all; a tenant member: its tenants' groups,
another tenant's group answers 404 as if it did not exist) and creates one (admins); ``.../groups/<group>/`` reads
one (with its place in the matching order), changes its members (PATCH) or deletes it (DELETE, refused while
requests of it are open); ``.../groups/<group>/values`` sets or removes its values all at once, as an admin's
AlterClientQuotas does for an entity. Tenants ask for a value with ``POST /api/requests/`` naming the ``group``.

Every change is ``quotas.models.group_changes``'s: one desired-state version pushed to every broker's quota
callback, audited. Refusals are 400 ``INVALID_GROUP`` (409 ``GROUP_OVERLAP`` when another group already matches the
same clients), ``details`` naming the field to change.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import permissions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from engine.groups import GROUP_KEYS
from portal.api.errors import ApiError, ErrorSerializer
from portal.api.pagination import PAGE_SIZE_PARAM, DefaultCursorPagination
from quotas.api.memory import memory_permits
from quotas.api.parsers import LenientJSONParser
from quotas.api.permissions import IsAdmin, IsAdminOrReadOnly
from quotas.api.serializers.groups import (
    GroupCreateSerializer,
    GroupMembersSerializer,
    GroupValuesResultSerializer,
    GroupValuesSerializer,
    QuotaGroupDetailSerializer,
    QuotaGroupPageSerializer,
    QuotaGroupSerializer,
)
from quotas.api.views.base import CLUSTER_PARAM, ERRORS, LIST_ERRORS, get_cluster, page_estimate
from quotas.models import (
    Cluster,
    GroupKind,
    InvalidGroup,
    QuotaGroup,
    create_group,
    delete_group,
    sees_everything,
    set_group_values,
    tenants_of,
    update_members,
)
from quotas.models.group_changes import ValueChange, check_group_value

GROUP_ROW_BYTES = 4 << 10  # a group, its tenant and up to three values (as a config row: names and numbers)
#: Creating or changing members may also answer 409 GROUP_OVERLAP.
CHANGE_ERRORS = {**ERRORS, 409: ErrorSerializer}
GROUP_PARAM = OpenApiParameter("group", OpenApiTypes.STR, OpenApiParameter.PATH, description="The group's name.")
#: The fields each kind's members are given by (a tenant group's are its tenant's patterns: none).
MEMBER_FIELDS = {
    GroupKind.TENANT: (),
    GroupKind.PRINCIPALS: ("principals",),
    GroupKind.CLIENT_PREFIX: ("client_id_prefix", "prefix_principal"),
}


def visible_groups(user: Any, cluster: Cluster) -> QuerySet[QuotaGroup]:
    """The cluster's groups the caller may see: all for admins and auditors, its tenants' for a member."""
    rows = QuotaGroup.objects.filter(cluster=cluster).select_related("cluster", "tenant").prefetch_related("values")
    return rows if sees_everything(user) else rows.filter(tenant__in=tenants_of(user))


def get_group(user: Any, cluster: Cluster, name: str) -> QuotaGroup:
    """The group of the URL, or NOT_FOUND (also for another tenant's group: whether it exists does not leak)."""
    group = visible_groups(user, cluster).filter(name=name).first()
    if group is None:
        listed = f"/api/clusters/{cluster.name}/groups/"
        message = f"No group named {name!r} on {cluster.name} that you may see; GET {listed} lists them."
        raise ApiError("NOT_FOUND", message, status_code=404)
    return group


def only_fields_of(kind: str, data: dict[str, Any]) -> None:
    """Refuse members given in a field another kind uses (InvalidGroup naming it), rather than dropping them; an
    empty one (a form's blank field) gives nothing and passes."""
    for field in ("principals", "client_id_prefix", "prefix_principal"):
        if data.get(field) and field not in MEMBER_FIELDS.get(kind, ()):
            if kind == GroupKind.TENANT:
                message = (f"A tenant group holds the principals its tenant owns; it has no {field}: change the "
                           "tenant's user patterns instead.")
            else:
                message = f"A {kind} group has no {field}; its members are its {' and '.join(MEMBER_FIELDS[kind])}."
            raise InvalidGroup(message, field)


def _detail(group: QuotaGroup, code: int = status.HTTP_200_OK) -> Response:
    fresh = QuotaGroup.objects.select_related("cluster", "tenant").prefetch_related("values").get(pk=group.pk)
    return Response(QuotaGroupDetailSerializer(fresh).data, status=code)


class GroupCursorPagination(DefaultCursorPagination):
    ordering = "name"


CREATE_EXAMPLES = [
    OpenApiExample("A tenant's principals", request_only=True,
                   value={"name": "payments", "tenant": "team-payments", "kind": "tenant"}),
    OpenApiExample("Listed principals", request_only=True,
                   value={"name": "pay-batch", "tenant": "team-payments", "kind": "principals",
                          "principals": ["svc-pay-batch", "svc-pay-report"], "description": "nightly jobs"}),
    OpenApiExample("A client-id prefix under one principal", request_only=True,
                   value={"name": "pay-etl", "tenant": "team-payments", "kind": "client_prefix",
                          "client_id_prefix": "etl-", "prefix_principal": "svc-pay-batch"}),
]
VALUES_EXAMPLES = [
    OpenApiExample("A cluster-wide produce budget, a per-broker fetch quota", request_only=True,
                   value={"ops": [{"key": "producer_byte_rate", "value": 10485760, "budget_scope": "cluster_wide"},
                                  {"key": "consumer_byte_rate", "value": 2097152}]}),
    OpenApiExample("Remove a value, checking first", request_only=True,
                   value={"ops": [{"key": "request_percentage", "value": None}], "validate_only": True}),
]


class GroupListView(APIView):
    """A cluster's groups: list (scoped to the caller's tenants), create (admins)."""

    permission_classes = [permissions.IsAuthenticated, IsAdminOrReadOnly]
    parser_classes = [LenientJSONParser]

    @extend_schema(
        operation_id="list_groups",
        summary="List a cluster's quota groups (members: their tenants' groups only)",
        parameters=[
            CLUSTER_PARAM,
            OpenApiParameter("tenant", OpenApiTypes.STR, OpenApiParameter.QUERY, description="One tenant's only."),
            OpenApiParameter("kind", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=GroupKind.values),
            OpenApiParameter("cursor", OpenApiTypes.STR, OpenApiParameter.QUERY, description="From `next`."),
            PAGE_SIZE_PARAM,
        ],
        responses={200: QuotaGroupPageSerializer, **LIST_ERRORS},
    )
    def get(self, request: Request, cluster: str) -> Response:
        rows = visible_groups(request.user, get_cluster(cluster))
        for name, column in (("tenant", "tenant__name"), ("kind", "kind")):
            if request.query_params.get(name):
                rows = rows.filter(**{column: request.query_params[name]})
        paginator = GroupCursorPagination()
        with memory_permits(page_estimate(paginator, request, GROUP_ROW_BYTES)):
            page = paginator.paginate_queryset(rows, request, view=self)
            return paginator.get_paginated_response(QuotaGroupSerializer(page, many=True).data)

    @extend_schema(
        operation_id="create_group",
        summary="Create a quota group (admins); it holds nobody back until a value is set",
        description=(
            "Kafka clusters only (an engine cluster is 400 INVALID_GROUP, details.cluster). `kind` tenant: every "
            "principal the tenant owns, kept in step with its patterns (one tenant group per tenant and cluster); "
            "principals: `principals`, each owned by the tenant and in no other principals group of the cluster; "
            "client_prefix: `client_id_prefix`, under `prefix_principal` only when given. A field another kind uses "
            "is refused, not dropped. 400 INVALID_GROUP names the field to change; 409 GROUP_OVERLAP when another "
            "group would match the same clients in a way the matching order cannot decide. Values are set with "
            "POST .../groups/{group}/values, or asked for by the tenant with POST /api/requests/ (`group`)."
        ),
        parameters=[CLUSTER_PARAM],
        request=GroupCreateSerializer,
        examples=CREATE_EXAMPLES,
        responses={201: QuotaGroupDetailSerializer, **CHANGE_ERRORS},
    )
    def post(self, request: Request, cluster: str) -> Response:
        target = get_cluster(cluster)
        body = GroupCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        only_fields_of(data["kind"], data)
        group = create_group(
            request.user, target, data["tenant"], data["name"], data["kind"],
            principals=data.get("principals"), client_id_prefix=data.get("client_id_prefix", ""),
            prefix_principal=data.get("prefix_principal", ""), description=data["description"],
        )
        return _detail(group, status.HTTP_201_CREATED)


class GroupDetailView(APIView):
    """One group: read (scoped as the list), change its members or delete it (admins)."""

    permission_classes = [permissions.IsAuthenticated, IsAdminOrReadOnly]
    parser_classes = [LenientJSONParser]

    @extend_schema(
        operation_id="get_group",
        summary="A quota group: its members, values and place in the matching order",
        parameters=[CLUSTER_PARAM, GROUP_PARAM],
        responses={200: QuotaGroupDetailSerializer, **ERRORS},
    )
    def get(self, request: Request, cluster: str, group: str) -> Response:
        return Response(QuotaGroupDetailSerializer(get_group(request.user, get_cluster(cluster), group)).data)

    @extend_schema(
        operation_id="patch_group",
        summary="Change a group's members (admins); its name, kind, tenant and values stay",
        description=(
            "A principals group takes `principals` (the whole new list); a client_prefix group `client_id_prefix` "
            "and/or `prefix_principal`. A tenant group has no members to send: it follows its tenant's patterns. "
            "Refused as on create (400 INVALID_GROUP, 409 GROUP_OVERLAP); one desired-state version, audited."
        ),
        parameters=[CLUSTER_PARAM, GROUP_PARAM],
        request=GroupMembersSerializer,
        examples=[OpenApiExample("New principals", request_only=True,
                                 value={"principals": ["svc-pay-batch", "svc-pay-archive"]})],
        responses={200: QuotaGroupDetailSerializer, **CHANGE_ERRORS},
    )
    def patch(self, request: Request, cluster: str, group: str) -> Response:
        row = get_group(request.user, get_cluster(cluster), group)
        body = GroupMembersSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        only_fields_of(row.kind, data)
        update_members(request.user, row, principals=data.get("principals"),
                       client_id_prefix=data.get("client_id_prefix"), prefix_principal=data.get("prefix_principal"))
        return _detail(row)

    @extend_schema(
        operation_id="delete_group",
        summary="Delete a group and its values (admins); its members fall back to their own quotas",
        description="Refused while requests of the group are open (400 INVALID_GROUP): decide or withdraw them "
        "first. Decided requests keep the group's name.",
        parameters=[CLUSTER_PARAM, GROUP_PARAM],
        responses={204: None, **ERRORS},
    )
    def delete(self, request: Request, cluster: str, group: str) -> Response:
        delete_group(request.user, get_group(request.user, get_cluster(cluster), group))
        return Response(status=status.HTTP_204_NO_CONTENT)


def _changes(ops: list[dict[str, Any]]) -> dict[str, ValueChange]:
    """The ops as ``set_group_values`` takes them, each judged first (InvalidGroup naming ``ops.<i>.<field>``)."""
    changes: dict[str, ValueChange] = {}
    for i, op in enumerate(ops):
        key, value, scope = op["key"], op["value"], op["budget_scope"]
        try:
            if value is None:
                if key not in GROUP_KEYS:
                    raise InvalidGroup(f"A group holds {', '.join(GROUP_KEYS)}, not {key!r}.", "key")
                check_group_value(key, 1.0, scope)  # a removal: only its key and scope to judge
            else:
                check_group_value(key, value, scope)
        except InvalidGroup as e:
            raise InvalidGroup(f"ops.{i}: {e.message}", f"ops.{i}.{e.field}") from e
        changes[key] = (value, scope)
    return changes


class GroupValuesView(APIView):
    """Set or remove a group's values in one desired-state version (admins), as AlterClientQuotas on one entity."""

    permission_classes = [permissions.IsAuthenticated, IsAdmin]
    parser_classes = [LenientJSONParser]

    @extend_schema(
        operation_id="alter_group_values",
        summary="Set or remove a group's values, all or none (admins)",
        description=(
            f"Each op sets one of {', '.join(GROUP_KEYS)} (a finite number > 0; whole bytes/s for byte rates) or "
            "removes it (`value: null`), per broker or as a cluster-wide budget (`budget_scope`; left out, the "
            "value keeps its scope, a new one is per_broker). Every op is judged before anything is written: one "
            "refused op refuses the call (400 INVALID_GROUP, details `ops.<i>.<field>`) and nothing changes. "
            "controller_mutation_rate is per broker only (Kafka's controller enforces it once). `validate_only` judges "
            "and changes nothing. Audited as quota changes of /groups/<name>; one desired-state version, pushed."
        ),
        parameters=[CLUSTER_PARAM, GROUP_PARAM],
        request=GroupValuesSerializer,
        examples=VALUES_EXAMPLES,
        responses={200: GroupValuesResultSerializer, **ERRORS},
    )
    def post(self, request: Request, cluster: str, group: str) -> Response:
        row = get_group(request.user, get_cluster(cluster), group)
        body = GroupValuesSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        changes = _changes(body.validated_data["ops"])
        validate_only = body.validated_data["validate_only"]
        version = None if validate_only else set_group_values(request.user, row, changes)
        fresh = QuotaGroup.objects.select_related("cluster", "tenant").prefetch_related("values").get(pk=row.pk)
        return Response({
            "group": QuotaGroupDetailSerializer(fresh).data,
            "changed": version is not None,
            "version": version,
            "validate_only": validate_only,
        })
