"""History API: impact previews of proposed quotas, and an entity's hourly usage history.

- ``POST /api/previews/`` ``{"cluster", "user", "client_id", "key", "value"}`` (or ``"group"`` instead of the
  entity: a group's value, replayed over its members' traffic together): the preview of the proposal on
  the usage landed now; 200 with the cached one when it is finished, else 202 while a worker computes it. Poll
  ``GET /api/previews/<id>/`` for ``state`` (queued, running, done, failed), ``progress`` (0..1), ``stage``, and at
  the end ``result`` (pipeline.whatif's figures and advice) or ``error`` (``{"code", "message"}``).
- ``GET /api/clusters/<cluster>/usage-history/?entity=<tags>&days=7``: the entity's hourly rollups per quota type.

Admins and auditors may preview and read every entity (a preview changes nothing); a tenant member the entities
its tenants own (403 PERMISSION_DENIED). The value may be text with a unit (``1.5 MiB/s``, as on the request form);
text in no accepted form is 400 naming the forms, and a bad key or number is 400 with the engine's (Kafka's) message.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from history import services
from history.group_previews import check_group_proposal
from history.models import ImpactPreview
from portal.api.errors import ApiError, ErrorSerializer
from quotas.api.params import int_param
from quotas.api.serializers.fields import KEY_MAX, QuotaValueField, with_parsed_value
from quotas.api.views.base import get_cluster
from quotas.choices import BUDGET_KEYS, BudgetScope
from quotas.models import QuotaGroup
from telemetry_ui.live.monitoring import check_tags, load_viewer

ERRORS = {400: ErrorSerializer, 401: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer}
MAX_DAYS = 92  # the longest span a usage-history query covers, in days


class PreviewCreateSerializer(serializers.Serializer):
    cluster = serializers.CharField(max_length=64, help_text="The cluster's name.")
    user = serializers.CharField(
        max_length=255, required=False, allow_null=True, default=None, help_text="A principal, or none."
    )
    client_id = serializers.CharField(
        max_length=255, required=False, allow_null=True, default=None, help_text="A client-id, or none."
    )
    key = serializers.CharField(
        max_length=KEY_MAX, help_text="producer_byte_rate, consumer_byte_rate, request_percentage, ..."
    )
    value = QuotaValueField(help_text="The proposed value: a finite number > 0 (whole bytes/s for byte rates), or "
                            "text with a unit such as 1.5 MiB/s.")
    scope = serializers.ChoiceField(
        choices=BudgetScope.choices, default=BudgetScope.PER_BROKER,
        help_text="per_broker (Kafka's meaning) or cluster_wide (a budget for the sum over the cluster's brokers).",
    )
    group = serializers.CharField(
        max_length=64, required=False, allow_null=True, default=None,
        help_text="A group of the cluster, instead of user/client_id: its value replayed over its members' recorded "
        "traffic together (one sensor, as the brokers enforce it).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = with_parsed_value(attrs)
        if attrs["group"] is not None and (attrs["user"] is not None or attrs["client_id"] is not None):
            raise serializers.ValidationError({"group": "Give a group or an entity (user / client_id), not both."})
        if attrs["scope"] == BudgetScope.CLUSTER_WIDE and attrs["key"] not in BUDGET_KEYS:
            raise serializers.ValidationError({"scope": f"A {attrs['key']} quota cannot be cluster-wide; only "
                                               f"{', '.join(BUDGET_KEYS)} can."})
        return attrs


class PreviewSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    error = serializers.SerializerMethodField(help_text="{code, message} when it failed, else null.")
    group = serializers.SerializerMethodField(help_text="The group whose value is previewed, else null.")

    class Meta:
        model = ImpactPreview
        fields = ["id", "cluster", "user", "client_id", "group", "key", "value", "scope", "state", "progress", "stage",
                  "result", "error", "data_version", "created", "updated"]
        read_only_fields = fields

    def get_group(self, obj: ImpactPreview) -> str | None:
        return obj.group_name or None

    def get_error(self, obj: ImpactPreview) -> dict[str, str] | None:
        return {"code": obj.error_code, "message": obj.error_message} if obj.error_code else None


class PreviewViewSet(mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Impact previews: what a proposed quota would have done to the entity's recorded traffic."""

    serializer_class = PreviewSerializer
    permission_classes = [permissions.IsAuthenticated]
    queryset = ImpactPreview.objects.select_related("cluster")
    lookup_value_regex = r"[0-9]+"

    def get_object(self) -> ImpactPreview:
        preview = super().get_object()
        if not services.may_see_preview(self.request.user, preview):
            raise ApiError("NOT_FOUND", f"No preview #{preview.pk}.", status_code=404)
        return preview

    @extend_schema(
        summary="Preview a proposed quota against the entity's recorded traffic",
        request=PreviewCreateSerializer,
        responses={200: PreviewSerializer, 202: PreviewSerializer, **ERRORS},
    )
    def create(self, request: Request) -> Response:
        body = PreviewCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        cluster = get_cluster(data["cluster"])
        group = None
        if data["group"] is not None:
            group = QuotaGroup.objects.select_related("tenant").filter(cluster=cluster, name=data["group"]).first()
            if group is None:
                raise ApiError("NOT_FOUND", f"Cluster {cluster.name} has no group {data['group']!r}.", status_code=404)
            value = check_group_proposal(request.user, group, data["key"], data["value"])
        else:
            value = services.check_proposal(request.user, data["user"], data["client_id"], data["key"], data["value"])
        preview = services.ensure_preview(request.user, cluster, data["user"], data["client_id"], data["key"], value,
                                          scope=data["scope"], group=group)
        code = status.HTTP_200_OK if preview.finished else status.HTTP_202_ACCEPTED
        return Response(PreviewSerializer(preview).data, status=code)


class UsageHistoryView(APIView):
    """An entity's hourly usage (pipeline.rollups, loaded by the history.tasks.rollups beat task)."""

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        summary="An entity's hourly usage history",
        parameters=[
            OpenApiParameter("entity", OpenApiTypes.STR, OpenApiParameter.QUERY, required=True,
                             description="Sensor tags '<URL-encoded user>:<client-id>'."),
            int_param("days", 1, MAX_DAYS, f"1..{MAX_DAYS}, default 7."),
        ],
        responses={200: OpenApiTypes.OBJECT, **ERRORS},
    )
    def get(self, request: Request, cluster: str) -> Response:
        found = get_cluster(cluster)
        tags = request.query_params.get("entity")
        why = check_tags(tags)
        if why is not None:
            raise ApiError("INVALID_REQUEST", why)
        days = _days(request.query_params.get("days"))
        viewer = load_viewer(request.user)
        if not viewer.may_watch(tags, found.name):
            raise ApiError("PERMISSION_DENIED", f"Entity {tags!r} is not one your tenants own.", status_code=403)
        series = services.entity_history(found.name, tags, days, connections=viewer.everything)
        body: dict[str, Any] = {"cluster": found.name, "entity": tags, "days": days, "series": series,
                                "resolution": services.history_resolution(found.name)}
        return Response(body)


def _days(raw: str | None) -> int:
    if raw in (None, ""):
        return 7
    try:
        days = int(raw)
    except ValueError:
        days = 0
    if not 1 <= days <= MAX_DAYS:
        raise ApiError("INVALID_REQUEST", f"'days' must be a whole number from 1 to {MAX_DAYS}, got {raw!r}.")
    return days
