"""``/api/tokens/``: create (the token is in that answer only), list, read and revoke personal access tokens."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from access_tokens.models import AccessToken
from portal.api.errors import ApiError
from quotas.models import Tenant
from quotas.models.tenants import is_admin, sees_everything, tenants_of


class AccessTokenSerializer(serializers.ModelSerializer):
    """A token as lists show it: never its text, only the first characters (``prefix``)."""

    user = serializers.SlugRelatedField(slug_field="username", read_only=True)
    tenant = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    scope = serializers.CharField(read_only=True, help_text="tenant: acts in `tenant` only; all: every right.")
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    revoked_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    active = serializers.SerializerMethodField()

    class Meta:
        model = AccessToken
        fields = [
            "id",
            "name",
            "user",
            "tenant",
            "scope",
            "prefix",
            "created",
            "created_by",
            "expires_at",
            "last_used",
            "revoked_at",
            "revoked_by",
            "active",
        ]
        read_only_fields = fields

    def get_active(self, obj: AccessToken) -> bool:
        return obj.revoked_at is None and not obj.expired()


class IssuedTokenSerializer(AccessTokenSerializer):
    """The answer to a create: the stored token and, this once, its text."""

    token = serializers.CharField(read_only=True, help_text="The token itself. Shown once: store it now.")

    class Meta(AccessTokenSerializer.Meta):
        fields = [*AccessTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class TokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, help_text="What the token is for (a CI job, a script).")
    tenant = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The tenant the token acts in. Leave out: your only tenant for members; all of your rights for "
        "admins and auditors.",
    )
    user = serializers.CharField(
        required=False, allow_null=True, default=None, help_text="Admins: whose token (default: yours)."
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)

    def validate_expires_at(self, value: Any) -> Any:
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("The expiry must be in the future.")
        return value


def _owner(request: Request, username: str | None) -> Any:
    """Whose token to make: the caller, or (admins only) the named account."""
    if username is None or username == request.user.get_username():
        return request.user
    if not is_admin(request.user):
        raise ApiError(
            "PERMISSION_DENIED", "Only admins create tokens for other accounts; leave `user` out.", status_code=403
        )
    found = get_user_model().objects.filter(username=username, is_active=True).first()
    if found is None:
        message = f"No active account named {username!r}."
        raise ApiError("INVALID_REQUEST", message, {"user": [message]})
    return found


def _tenant(owner: Any, name: str | None) -> Tenant | None:
    """The token's tenant: the one named (the owner must be a member), else the owner's only one unless the owner
    is an admin or auditor (then none: every right)."""
    member_of = list(Tenant.objects.filter(members=owner).order_by("name"))
    if name is None:
        if sees_everything(owner):
            return None
        if len(member_of) == 1:
            return member_of[0]
        message = (
            "Name the tenant the token acts in: one of " + ", ".join(repr(t.name) for t in member_of) + "."
            if member_of
            else f"{owner.get_username()!r} is a member of no tenant: ask an admin to add the account to one."
        )
        raise ApiError("INVALID_REQUEST", message, {"tenant": [message]})
    chosen = next((t for t in member_of if t.name == name), None)
    if chosen is None:
        message = f"{owner.get_username()!r} is not a member of a tenant named {name!r}; GET /api/tenants/ lists yours."
        raise ApiError("INVALID_REQUEST", message, {"tenant": [message]})
    return chosen


@extend_schema_view(
    list=extend_schema(
        summary="Personal access tokens (yours; admins and auditors: everyone's)",
        parameters=[OpenApiParameter("user", str, description="Admins: only this account's tokens.")],
    ),
    retrieve=extend_schema(summary="One personal access token (never its text)"),
)
class AccessTokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Personal access tokens: ``Authorization: Bearer <token>`` for scripts and ``quotactl``.

    A token acts within one tenant (a member of it and nothing more) or, for admins and auditors, with all of the
    owner's rights. Its text is answered once, by the create; the portal keeps only its SHA-256 digest.
    """

    serializer_class = AccessTokenSerializer
    queryset = AccessToken.objects.all()  # for the schema (the id's type); get_queryset scopes every request

    def get_queryset(self) -> QuerySet[AccessToken]:
        rows = AccessToken.objects.select_related("user", "tenant", "created_by", "revoked_by")
        if not sees_everything(self.request.user):  # admins and auditors read every token (never its text)
            return rows.filter(user=self.request.user)
        username = self.request.query_params.get("user")
        return rows.filter(user__username=username) if username else rows

    @extend_schema(
        summary="Create a personal access token (its text is in this answer only)",
        request=TokenCreateSerializer,
        responses={201: IssuedTokenSerializer},
    )
    def create(self, request: Request) -> Response:
        body = TokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        owner = _owner(request, data["user"])
        if owner == request.user and data["tenant"] is None and not sees_everything(request.user):
            # a tenant-scoped token may only make tokens of its own tenant
            scoped = list(tenants_of(request.user))
            if len(scoped) == 1:
                data["tenant"] = scoped[0].name
        tenant = _tenant(owner, data["tenant"])
        if owner == request.user and tenant is not None and not tenants_of(request.user).filter(pk=tenant.pk).exists():
            message = f"This request acts in another tenant than {tenant.name!r}; it cannot make tokens for it."
            raise ApiError("PERMISSION_DENIED", message, status_code=403)
        row, text = AccessToken.issue(owner, data["name"], tenant, request.user, data["expires_at"])
        answer = IssuedTokenSerializer(row).data
        answer["token"] = text
        return Response(answer, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Revoke a token (admins: any; owners: their own)", request=None, responses={200: AccessTokenSerializer}
    )
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        row = self.get_object()
        if row.user_id != request.user.pk and not is_admin(request.user):
            raise ApiError("PERMISSION_DENIED", "Only admins revoke other accounts' tokens.", status_code=403)
        if row.revoked_at is None:
            row.revoked_at, row.revoked_by = timezone.now(), request.user
            row.save(update_fields=["revoked_at", "revoked_by"])
        return Response(AccessTokenSerializer(row).data)
