"""The quotas-as-code API: export a cluster's state, plan a quota file, apply a plan, decide grouped requests.

- ``GET /api/clusters/<name>/state.yaml``: the desired state as a quota file (``text/yaml``); a tenant member gets
  what its tenant owns.
- ``GET /api/schema/quotas-file.json``: the file's JSON Schema.
- ``POST /api/clusters/<name>/plans/`` ``{"document": "<yaml>", "prune": false, "tenant": null}``: 201 with the
  stored plan; 400 ``INVALID_QUOTAS_FILE`` with ``errors: [{"line", "key", "message"}]`` for a bad file.
- ``GET /api/plans/<id>/``: the plan, ``stale`` once desired state moved on after ``base_version``.
- ``POST /api/plans/<id>/apply/``: an admin's applies it (200 ``{"state": "applied", "version"}``), a member's
  becomes one grouped request (202 ``{"state": "submitted", "request"}``); stale: 409 ``PLAN_STALE``.
- ``/api/plan-requests/``: the grouped requests (list, detail with the plan, approve, reject, withdraw).
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

import quotafile
from plans import services
from portal.api.errors import ApiError, ErrorSerializer
from quotas.api.serializers.requests import DecisionSerializer, MovedSerializer, RejectSerializer
from quotas.api.views.base import get_cluster
from quotas.choices import BudgetScope
from quotas.models import Plan, PlanRequest, PlanStale, PlanState, RequestState
from quotas.models.plans import apply_plan, plan_moved
from quotas.models.tenants import is_auditor, sees_everything, tenants_of
from quotas.workflow import plan_requests

ERRORS = {400: ErrorSerializer, 401: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer}
#: The largest quota file a plan reads (the API's body limit is QUOTAS_MAX_BODY_BYTES).
DOCUMENT_MAX = quotafile.MAX_TEXT


class FileErrorSerializer(serializers.Serializer):
    line = serializers.IntegerField(allow_null=True, help_text="1-based line of the file; null: the whole file.")
    key = serializers.CharField(allow_null=True, help_text="The key at fault (e.g. producer_byte_rate).")
    message = serializers.CharField()


class InvalidFileSerializer(ErrorSerializer):
    """400 INVALID_QUOTAS_FILE: every problem of the file with its line and key."""

    errors = FileErrorSerializer(many=True, required=False, help_text="INVALID_QUOTAS_FILE: every problem found.")


class PlanCreateSerializer(serializers.Serializer):
    document = serializers.CharField(
        max_length=DOCUMENT_MAX, trim_whitespace=False, help_text="The quota file (YAML, apiVersion quotas/v1)."
    )
    prune = serializers.BooleanField(
        default=False,
        help_text="Remove entities of the file's sections that the file leaves out (a member: only what its "
        "tenant owns). Without it they are left alone.",
    )
    tenant = serializers.CharField(
        required=False, allow_null=True, default=None, max_length=64,
        help_text="A member of several tenants names the one the plan is for.",
    )


class PlanChangeSerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=[quotafile.ADD, quotafile.CHANGE, quotafile.REMOVE])
    section = serializers.ChoiceField(
        choices=[quotafile.QUOTA, quotafile.BROKER, quotafile.TOPIC, quotafile.CLIENT_METRICS, quotafile.GROUP,
                 quotafile.EXEMPT]
    )
    entity = serializers.DictField(child=serializers.CharField(),
                                   help_text="e.g. {user, client-id}, {broker}, {group} or {principal} (exempt).")
    path = serializers.CharField(help_text="Kafka's config path, e.g. /config/users/alice/clients/app-1.")
    key = serializers.CharField(help_text="A quota or config key; for a group also members or description; exempt.")
    old = serializers.JSONField(allow_null=True, help_text="null: no value before (add).")
    new = serializers.JSONField(allow_null=True, help_text="null: removed.")
    old_display = serializers.CharField(
        required=False, allow_null=True,
        help_text="Quotas and group values: the value in its unit; a group's members: who it holds, in words.",
    )
    new_display = serializers.CharField(required=False, allow_null=True)
    old_scope = serializers.ChoiceField(
        choices=BudgetScope.choices, required=False, allow_null=True,
        help_text="Quotas: the value's budget scope before (per_broker or cluster_wide; null: no value).",
    )
    new_scope = serializers.ChoiceField(
        choices=BudgetScope.choices, required=False, allow_null=True,
        help_text="Quotas: after (a change of scope alone is a change, old and new then the same number).",
    )
    reach = serializers.CharField(
        required=False, allow_null=True,
        help_text="Groups (key members: created, deleted or a member change; or a value) and exempt principals: "
        "which clients the change reaches, in words.",
    )
    impact = serializers.JSONField(
        allow_null=True,
        help_text="Byte-rate adds and changes: {preview, state (queued, running, done, failed), progress, stage, "
        "summary (the replay's figures once done), error}; computed asynchronously on the pipeline queue.",
    )
    capacity = serializers.JSONField(
        allow_null=True,
        help_text="Byte-rate keys: the cluster's granted total without and with the whole plan "
        "{key, capacity, granted_without, granted_with, exceeds, warning, counted, budgets, budget_with, "
        "budget_without, groups}: per-broker values x brokers, cluster-wide budgets once, each group once.",
    )
    warnings = serializers.ListField(child=serializers.CharField())


class SummarySerializer(serializers.Serializer):
    add = serializers.IntegerField()
    change = serializers.IntegerField()
    remove = serializers.IntegerField()


class PlanSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    cluster = serializers.CharField()
    base_version = serializers.IntegerField(help_text="The desired-state version the plan was made against.")
    stale = serializers.BooleanField(help_text="Desired state moved on since base_version: apply answers 409.")
    prune = serializers.BooleanField()
    created_by = serializers.CharField(allow_null=True)
    tenant = serializers.CharField(allow_null=True, help_text="The tenant a member planned for; null for admins.")
    state = serializers.ChoiceField(choices=PlanState.values)
    applied_version = serializers.IntegerField(allow_null=True)
    request = serializers.IntegerField(allow_null=True, help_text="The grouped request, once submitted.")
    created = serializers.DateTimeField()
    changes = PlanChangeSerializer(many=True, help_text="In Kafka's precedence order.")
    summary = SummarySerializer()


class ApplyResponseSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=["applied", "submitted"])
    plan = serializers.IntegerField()
    version = serializers.IntegerField(required=False, help_text="applied: the desired-state version now.")
    changed = serializers.BooleanField(required=False)
    request = serializers.IntegerField(required=False, help_text="submitted: the grouped request's id.")


class ApplyBodySerializer(serializers.Serializer):
    reason = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=4000, help_text="A member's reason, for the admin."
    )


class PlanRequestSerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    summary = serializers.SerializerMethodField()

    class Meta:
        model = PlanRequest
        fields = ["id", "plan", "tenant", "cluster", "requested_by", "reason", "state", "decided_by",
                  "decision_comment", "decision_reason", "decided_at", "applied_version", "failure", "summary",
                  "created", "updated"]
        read_only_fields = fields
        extra_kwargs = {"decision_reason": {
            "help_text": "superseded: rejected because values it changes moved on since the plan was made; else ''."
        }}

    def get_summary(self, obj: PlanRequest) -> dict[str, int]:
        return obj.plan.summary


class PlanRequestDetailSerializer(PlanRequestSerializer):
    plan_detail = serializers.SerializerMethodField()
    stale = serializers.SerializerMethodField(
        help_text="A submitted request whose plan changes values that moved on since it was made: each with what it "
        "was, what it is and what changed it (approve answers 409 PLAN_STALE: reject it as superseded); null "
        "otherwise."
    )

    class Meta(PlanRequestSerializer.Meta):
        fields = [*PlanRequestSerializer.Meta.fields, "plan_detail", "stale"]
        read_only_fields = fields

    @extend_schema_field(PlanSerializer)
    def get_plan_detail(self, obj: PlanRequest) -> dict[str, Any]:
        return services.plan_body(obj.plan)

    @extend_schema_field(MovedSerializer(many=True, allow_null=True))
    def get_stale(self, obj: PlanRequest) -> list[dict[str, Any]] | None:
        moved = plan_moved(obj.plan) if obj.state == RequestState.SUBMITTED else []
        return MovedSerializer([m.as_dict() for m in moved], many=True).data if moved else None


def invalid_file(e: quotafile.InvalidQuotaFile) -> Response:
    body = {"code": e.code, "message": e.message, "details": None, "errors": [x.as_dict() for x in e.errors]}
    return Response(body, status=status.HTTP_400_BAD_REQUEST)


class QuotasFileSchemaView(APIView):
    """The JSON Schema of the quota file (a schema holds no data: open like the OpenAPI schema)."""

    permission_classes = [permissions.AllowAny]

    @extend_schema(summary="JSON Schema of the quota file (quotas/v1)", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        return Response(quotafile.json_schema())


class StateExportView(APIView):
    """A cluster's desired state as a quota file."""

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        summary="Export the cluster's desired state as a quota file (YAML)",
        operation_id="clusters_state_export",
        description="Admins and auditors get everything; a tenant member the quotas its tenants may read (owned "
        "entities and the <default> ones) and the client-metrics subscriptions selecting only its clients, without "
        "broker and topic configs. Planning the exported file unchanged gives no changes.",
        # the YAML document is a quota file (an object; its JSON Schema is GET /api/schema/quotas-file.json), not a
        # string: a client reading text/yaml gets a mapping
        responses={(200, "text/yaml"): OpenApiResponse(OpenApiTypes.OBJECT, "A quota file (quotas/v1)."), **ERRORS},
    )
    def get(self, request: Request, cluster: str) -> HttpResponse:
        found = get_cluster(cluster)
        text = services.export(request.user, found)
        response = HttpResponse(text, content_type="text/yaml; charset=utf-8")
        response["Content-Disposition"] = f'inline; filename="{found.name}.yaml"'
        return response


class PlanCreateView(APIView):
    """Plan a quota file against the cluster's desired state."""

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        summary="Plan a quota file: the changes against desired state, with impact, capacity and warnings",
        description="Changes come in Kafka's precedence order (client quotas level 1..8, ips, broker configs per "
        "broker then <default>, topics, client-metrics). Entities the file leaves out are left alone unless "
        "prune is true; sections the file leaves out are never touched. Byte-rate changes carry the impact "
        "preview on landed traffic, computed asynchronously (poll GET /api/plans/<id>/ for its state).",
        request=PlanCreateSerializer,
        responses={201: PlanSerializer, 400: OpenApiResponse(InvalidFileSerializer, "INVALID_QUOTAS_FILE or "
                                                             "INVALID_REQUEST"), 401: ErrorSerializer,
                   403: ErrorSerializer, 404: ErrorSerializer},
    )
    def post(self, request: Request, cluster: str) -> Response:
        found = get_cluster(cluster)
        body = PlanCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            plan = services.build_plan(request.user, found, data["document"], data["prune"], data["tenant"])
        except quotafile.InvalidQuotaFile as e:
            return invalid_file(e)
        return Response(services.plan_body(plan), status=status.HTTP_201_CREATED)


def _load_plan(request: Request, pk: int) -> Plan:
    plan = Plan.objects.select_related("cluster", "created_by", "tenant").filter(pk=pk).first()
    if plan is None or not services.may_see_plan(request.user, plan):
        raise ApiError("NOT_FOUND", f"No plan #{pk}.", status_code=404)
    return plan


class PlanDetailView(APIView):
    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(summary="A plan, with each preview's current state", responses={200: PlanSerializer, **ERRORS})
    def get(self, request: Request, pk: int) -> Response:
        return Response(services.plan_body(_load_plan(request, pk)))


class PlanApplyView(APIView):
    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        summary="Apply a plan: an admin's at once, a tenant member's as one grouped request",
        description="Admins: every change in one transaction, one desired-state version, audited and pushed "
        "(200). Tenant members: one grouped request an admin approves or rejects as a whole (202). A plan made "
        "against an older desired-state version: 409 PLAN_STALE (plan the file again). Auditors: 403.",
        request=ApplyBodySerializer,
        responses={200: ApplyResponseSerializer, 202: ApplyResponseSerializer, 409: ErrorSerializer, **ERRORS},
    )
    def post(self, request: Request, pk: int) -> Response:
        plan = _load_plan(request, pk)
        body = ApplyBodySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        actor = request.user
        if is_auditor(actor):
            raise ApiError("PERMISSION_DENIED", "Auditors read and plan; applying is for admins and members.",
                           status_code=403)
        if plan.state != PlanState.PLANNED:
            raise ApiError("CONFLICT", f"Plan #{plan.pk} is {plan.state} already; plan the file again for a new one.",
                           status_code=409)
        if services.may_apply_directly(actor):
            try:
                version, changed = workflow_apply(plan, actor)
            except PlanStale as e:
                raise ApiError(e.code, e.message, {"base_version": plan.base_version}, status_code=409) from e
            return Response({"state": "applied", "plan": plan.pk, "version": version, "changed": changed})
        if plan.tenant is None or not tenants_of(actor).filter(pk=plan.tenant_id).exists():
            raise ApiError("PERMISSION_DENIED", f"Plan #{plan.pk} was made by an admin; an admin applies it.",
                           status_code=403)
        if plan.stale:
            raise ApiError("PLAN_STALE", f"Plan #{plan.pk} was made against desired-state version "
                           f"{plan.base_version}, which has moved on; plan the file again.",
                           {"base_version": plan.base_version}, status_code=409)
        if not plan.changes:
            version, changed = workflow_apply(plan, actor)
            return Response({"state": "applied", "plan": plan.pk, "version": version, "changed": changed})
        grouped = plan_requests.submit_plan(actor, plan, body.validated_data["reason"])
        return Response({"state": "submitted", "plan": plan.pk, "request": grouped.pk},
                        status=status.HTTP_202_ACCEPTED)


def workflow_apply(plan: Plan, actor: Any) -> tuple[int, bool]:
    """An admin's apply: strict, so any change of desired state since the plan refuses it (PLAN_STALE)."""
    return apply_plan(plan, actor, strict=True)


SCOPED_ERRORS = {**ERRORS, 409: ErrorSerializer}


@extend_schema_view(
    list=extend_schema(
        summary="Grouped plan requests you may see",
        parameters=[
            OpenApiParameter("state", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=RequestState.values),
            OpenApiParameter("cluster", OpenApiTypes.STR, OpenApiParameter.QUERY),
        ],
        responses={200: PlanRequestSerializer(many=True)},
    ),
    retrieve=extend_schema(summary="A grouped plan request with its plan", responses={200: PlanRequestDetailSerializer,
                                                                                    **ERRORS}),
)
class PlanRequestViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Tenants' grouped requests to apply a plan: an admin approves or rejects each as a whole."""

    serializer_class = PlanRequestSerializer
    permission_classes = [permissions.IsAuthenticated]
    lookup_value_regex = r"[0-9]+"

    def get_queryset(self) -> QuerySet[PlanRequest]:
        user = self.request.user
        rows = PlanRequest.objects.select_related("tenant", "cluster", "requested_by", "decided_by", "plan")
        if not sees_everything(user):
            rows = rows.filter(tenant__in=tenants_of(user))
        params = self.request.query_params
        for name, column in (("state", "state"), ("cluster", "cluster__name")):
            if params.get(name):
                rows = rows.filter(**{column: params[name]})
        return rows

    def get_serializer_class(self) -> type[serializers.Serializer]:
        return PlanRequestDetailSerializer if self.action != "list" else PlanRequestSerializer

    def _decide(self, request: Request, transition: Any, body_type: type[DecisionSerializer] = DecisionSerializer
                ) -> Response:
        target = self.get_object()
        body = body_type(data=request.data)
        body.is_valid(raise_exception=True)
        transition(request.user, target.pk, **body.validated_data)
        fresh = self.get_queryset().get(pk=target.pk)
        return Response(PlanRequestDetailSerializer(fresh).data)

    @extend_schema(summary="Approve and apply the whole plan (admins; never one's own request)",
                   description="409 PLAN_STALE when a value the plan changes moved on since it was made (the "
                   "request stays submitted: reject it as superseded; `details.moved` and the request's `stale` say "
                   "what moved); 409 CONFLICT when it was decided already.",
                   request=DecisionSerializer, responses={200: PlanRequestDetailSerializer, **SCOPED_ERRORS})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        return self._decide(request, plan_requests.approve_plan)

    @extend_schema(summary="Reject the whole plan, saying why (admins; never one's own request)",
                   description="`superseded: true` rejects a request whose values moved on since the plan was made "
                   "(its `stale`), recording the reason and what changed in the comment (optional then); 400 when "
                   "none did.",
                   request=RejectSerializer, responses={200: PlanRequestDetailSerializer, **SCOPED_ERRORS})
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        return self._decide(request, plan_requests.reject_plan, RejectSerializer)

    @extend_schema(summary="Withdraw an undecided plan request", request=DecisionSerializer,
                   responses={200: PlanRequestDetailSerializer, **SCOPED_ERRORS})
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str) -> Response:
        return self._decide(request, plan_requests.withdraw_plan)
