"""The Django admin lists tokens (never their text) and revokes them."""

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from access_tokens.models import AccessToken


@admin.register(AccessToken)
class AccessTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "name", "user", "tenant", "created", "last_used", "expires_at", "revoked_at"]
    list_filter = ["tenant"]
    search_fields = ["name", "prefix", "user__username"]
    readonly_fields = ["prefix", "digest", "created", "created_by", "last_used", "revoked_at", "revoked_by"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: object) -> None:
        queryset.filter(revoked_at=None).update(revoked_at=timezone.now(), revoked_by=request.user)  # type: ignore[attr-defined]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made through POST /api/tokens/, the only place the text is shown
