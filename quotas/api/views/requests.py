"""Self-service quota requests: submit, withdraw, approve, reject."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.errors import ApiError, ErrorSerializer
from quotas.api.serializers.requests import (
    ApproveSerializer,
    DecisionSerializer,
    QuotaRequestCreateSerializer,
    QuotaRequestDetailSerializer,
    QuotaRequestSerializer,
    RejectSerializer,
)
from quotas.api.views.base import ERRORS, REQUEST_ROW_BYTES, SCOPED_ERRORS, MemoryBoundedListMixin
from quotas.api.views.groups import visible_groups
from quotas.models import Cluster, QuotaGroup, QuotaRequest, RequestState, sees_everything, tenants_of
from quotas.workflow import quota_requests

REQUEST_FILTERS = [
    OpenApiParameter("state", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=RequestState.values),
    OpenApiParameter("tenant", OpenApiTypes.STR, OpenApiParameter.QUERY, description="A tenant's name."),
    OpenApiParameter("cluster", OpenApiTypes.STR, OpenApiParameter.QUERY, description="A cluster's name."),
    OpenApiParameter("group", OpenApiTypes.STR, OpenApiParameter.QUERY, description="A group's name: its requests."),
]


def _group(request: Request, cluster: Cluster, name: str) -> QuotaGroup:
    """The group a request names, among those the caller may see (another tenant's is as unknown as none)."""
    group = visible_groups(request.user, cluster).filter(name=name).first()
    if group is None:
        listed = f"/api/clusters/{cluster.name}/groups/"
        message = f"No group named {name!r} on {cluster.name} that you may see; GET {listed} lists yours."
        raise ApiError("INVALID_REQUEST", message, {"group": [message]})
    return group


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
        for name, column in (("state", "state"), ("tenant", "tenant__name"), ("cluster", "cluster__name"),
                             ("group", "group_name")):
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
            "(400 INVALID_BUDGET_SCOPE, details.budget_scope, for a scope the value cannot have). `group` (a group "
            "of `cluster` the tenant owns) instead of user/client_id asks for one of the group's values, per broker "
            "or cluster-wide; a group's value is never a boost (400 INVALID_REQUEST, details.expires_at), and a "
            "group the caller may not see is refused as unknown (400 INVALID_REQUEST, details.group)."
        ),
        request=QuotaRequestCreateSerializer,
        responses={201: QuotaRequestSerializer, **ERRORS},
    )
    def create(self, request: Request) -> Response:
        body = QuotaRequestCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        group = None if data["group"] is None else _group(request, data["cluster"], data["group"])
        created = quota_requests.submit(
            request.user,
            data["tenant"],
            data["cluster"],
            group=group,
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
