"""Who may call what in the quota API: admins, auditors, members (DRF permission classes)."""

from __future__ import annotations

from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.views import APIView

from quotas.models import is_admin, sees_everything
from quotas.reapply import REAPPLY_ADMINS_ONLY

STAFF_ONLY = (
    "Only admins (staff or the quota-admins group) can change quotas, clusters and tenants; tenants ask for "
    "quotas with POST /api/requests/."
)


class IsAdmin(permissions.BasePermission):
    """Admins only: staff or the quota-admins group, never an auditor."""

    message = STAFF_ONLY

    def has_permission(self, request: Request, view: APIView) -> bool:
        return is_admin(request.user)


class IsAdminOrReadOnly(IsAdmin):
    """Anyone authenticated reads; admins write."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.method in permissions.SAFE_METHODS or super().has_permission(request, view)


class IsAdminOrAuditor(permissions.BasePermission):
    """Operational views (metrics) are for the people who run the portal: admins and auditors."""

    message = "Only admins and auditors read the portal's metrics."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return sees_everything(request.user)


class SeesOperations(permissions.BasePermission):
    """Push status and drift are for the people who run the portal: admins and auditors."""

    message = "Only admins and auditors read push status and drift."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return sees_everything(request.user)


class SeesEveryPush(SeesOperations):
    message = (
        "Only admins and auditors list every push; you see the pushes of your own requests on each request: "
        "GET /api/requests/{id}/ (its `pushes`)."
    )


class IsAdminToReapply(IsAdmin):
    message = REAPPLY_ADMINS_ONLY
