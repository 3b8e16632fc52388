"""The audit trail."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, viewsets

from portal.api.errors import ErrorSerializer
from quotas.api.params import id_param, read_id
from quotas.api.serializers.audit import AuditEntrySerializer
from quotas.api.views.base import AUDIT_ROW_BYTES, MemoryBoundedListMixin
from quotas.models import AuditEntry, sees_everything, tenants_of


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
