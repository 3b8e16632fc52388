"""Tenants by name."""

from __future__ import annotations

from django.db.models import ProtectedError, QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import permissions, viewsets

from portal.api.errors import ApiError, ErrorSerializer
from quotas.api.permissions import IsAdminOrReadOnly
from quotas.api.serializers.tenants import TenantSerializer
from quotas.api.views.base import ERRORS, SCOPED_ERRORS
from quotas.models import Tenant, sees_everything, tenants_of


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
