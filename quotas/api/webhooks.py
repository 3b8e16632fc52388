"""Tenants' outgoing webhooks and their delivery log (serializers and views).

``/api/webhooks/`` manages them and ``/api/webhook-deliveries/`` reads what was sent. Admins write; admins and
auditors read; tenant members do neither: a webhook makes the portal's workers POST to any URL it names (from inside
the network), so who may point it somewhere is the same people who may change clusters.

The signing secret is in one response body only (the 201 of a create, the 200 of ``rotate-secret``), with
``Cache-Control: no-store``; the portal keeps it to sign, but no list, detail, delivery, audit entry or log shows it.
A secret may be given at creation (a chat tool that issues its own), else the portal generates one.
"""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import urlsplit

from django.core.validators import URLValidator
from django.db import transaction
from django.db.models import QuerySet
from django.utils.cache import add_never_cache_headers
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.errors import ApiError, ErrorSerializer, unknown_name
from quotas import notify
from quotas.api.params import id_param, read_id
from quotas.api.views.base import ERRORS, LIST_ERRORS, MemoryBoundedListMixin
from quotas.models import (
    AuditAction,
    DeliveryState,
    Tenant,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    is_admin,
    record,
    sees_everything,
)
from quotas.models.webhook_destinations import ForbiddenDestination, check_url
from quotas.models.webhooks import REQUEST_FIELDS, default_events

DELIVERY_ROW_BYTES = 4 << 10  # a delivery, its webhook and tenant, an error text (as pushes)
NOT_SHOWN_AGAIN = "Keep the secret now: it is not shown again (POST .../rotate-secret/ makes a new one)."


class WebhookPermission(permissions.BasePermission):
    """Admins write (a webhook sends the portal's requests to any URL); admins and auditors read."""

    message = (
        "Only admins (staff or the quota-admins group) manage webhooks, and admins and auditors read them and their "
        "deliveries: a webhook makes the portal send requests to the URL it names."
    )

    def has_permission(self, request: Request, view: APIView) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return sees_everything(request.user)
        return is_admin(request.user)


# ------------------------------------------------------------------ serializers


class WebhookSerializer(serializers.ModelSerializer):
    """A webhook, never its secret."""

    tenant = serializers.SlugRelatedField(
        slug_field="name", queryset=Tenant.objects.all(), error_messages=unknown_name("tenant", "/api/tenants/")
    )
    url = serializers.URLField(
        max_length=1000, validators=[URLValidator(schemes=["http", "https"])], help_text="The http(s) URL POSTed to."
    )
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=WebhookEvent.choices),
        default=default_events,
        allow_empty=False,
        help_text="What it hears; default every request.* event.",
    )
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Webhook
        fields = ["id", "tenant", "name", "url", "events", "active", "created", "created_by", "updated"]
        read_only_fields = ["id", "created", "created_by", "updated"]

    def validate_url(self, value: str) -> str:
        try:
            check_url(value)
        except ForbiddenDestination as e:  # typed, not INVALID_REQUEST: the URL is well formed, the policy refuses it
            raise ApiError(e.code, str(e), {"url": [str(e)]}) from None
        return value

    def validate_tenant(self, value: Tenant) -> Tenant:
        if self.instance is not None and value != self.instance.tenant:
            raise serializers.ValidationError("A webhook stays with its tenant (its deliveries name it); add another.")
        return value

    def validate_events(self, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))


class WebhookCreateSerializer(WebhookSerializer):
    secret = serializers.CharField(
        write_only=True, required=False, min_length=16, max_length=256, trim_whitespace=False,
        help_text="The HMAC-SHA256 key; leave it out and the portal generates one (shown once in the answer).",
    )

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]


class WebhookIssuedSerializer(WebhookSerializer):
    """The answer that made a secret: the webhook, the secret and a reminder that it is not shown again."""

    secret = serializers.CharField(read_only=True, help_text="Shown in this response only.")
    warning = serializers.CharField(read_only=True)

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret", "warning"]


class PingSerializer(serializers.Serializer):
    delivery = serializers.IntegerField(help_text="GET /api/webhook-deliveries/{delivery}/ shows how it went.")
    status = serializers.CharField()


class WebhookDeliverySerializer(serializers.ModelSerializer):
    """One event sent to one webhook: how its attempts went (the body's SHA-256; the body itself on the detail).

    ``request``, ``subscription_request`` and ``plan_request``: the id of the request it tells about, in the field of
    its kind (``kind``); null for a ping."""

    delivery = serializers.UUIDField(source="uuid", read_only=True, help_text="The X-Quotas-Delivery header.")
    tenant = serializers.CharField(source="webhook.tenant.name", read_only=True)
    kind = serializers.ChoiceField(
        choices=list(REQUEST_FIELDS), read_only=True, allow_null=True,
        help_text="Which kind of request it tells about (null: a ping, or the request was deleted).",
    )

    class Meta:
        model = WebhookDelivery
        fields = ["id", "delivery", "webhook", "tenant", "event", "kind", "request", "subscription_request",
                  "plan_request", "state", "attempts", "status_code", "last_error", "created", "last_attempt_at",
                  "next_attempt_at", "delivered_at", "body_sha256"]
        read_only_fields = fields


class WebhookDeliveryDetailSerializer(WebhookDeliverySerializer):
    body = serializers.JSONField(source="payload", read_only=True, help_text="The JSON body sent (signed as text).")

    class Meta(WebhookDeliverySerializer.Meta):
        fields = [*WebhookDeliverySerializer.Meta.fields, "body"]
        read_only_fields = fields


# ------------------------------------------------------------------ views


def _described(hook: Webhook) -> dict[str, Any]:
    """What the audit keeps of a webhook: no secret, and of the URL only its host (some URLs are credentials)."""
    return {"name": hook.name, "host": urlsplit(hook.url).hostname, "events": hook.events, "active": hook.active}


def _audit(hook: Webhook, actor: Any, what: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
    record(AuditAction.WEBHOOK_CHANGED, actor, tenant=hook.tenant, entity=f"webhook {hook.name}", key=what,
           before=before, after=after)


def _issued(hook: Webhook, secret: str, code: int) -> Response:
    body = {**WebhookSerializer(hook).data, "secret": secret, "warning": NOT_SHOWN_AGAIN}
    response = Response(body, status=code)
    add_never_cache_headers(response)  # Cache-Control: ... no-store ...: no cache on the way keeps the secret
    response["Pragma"] = "no-cache"
    return response


WEBHOOK_FILTERS = [
    OpenApiParameter("tenant", OpenApiTypes.STR, OpenApiParameter.QUERY, description="A tenant's name."),
    OpenApiParameter("active", OpenApiTypes.BOOL, OpenApiParameter.QUERY),
]
CHANGE_ERRORS = {**ERRORS, 409: ErrorSerializer}


@extend_schema_view(
    list=extend_schema(
        summary="List webhooks (admins and auditors)", parameters=WEBHOOK_FILTERS,
        responses={200: WebhookSerializer(many=True), **ERRORS},
    ),
    retrieve=extend_schema(summary="A webhook, without its secret", responses={200: WebhookSerializer, **ERRORS}),
    create=extend_schema(
        summary="Add a webhook to a tenant (admins); the secret is in this response only",
        description=(
            "Events of the tenant's requests (`request.submitted`, `.approved`, `.rejected`, `.withdrawn`, "
            "`.applied`, `.failed`, `.expired`; of quota, subscription and plan requests alike, the body's `kind` "
            "saying which) are POSTed to `url` as JSON, with `X-Quotas-Event`, "
            "`X-Quotas-Delivery` (the same on every retry of one delivery) and `X-Quotas-Signature: "
            "sha256=<hex HMAC-SHA256 of the raw body under the secret>`. A 2xx answer delivers; no answer, 408, 429 "
            "and 5xx are retried with exponential backoff and jitter (at most QUOTAS_WEBHOOK_MAX_ATTEMPTS attempts, "
            "8 by default), other answers (3xx included: redirects are not followed) fail the delivery. The answer "
            "(`Cache-Control: no-store`) is the only one that shows the secret. A `url` whose host is or resolves to "
            "a loopback, link-local or private address is refused with POLICY_VIOLATION, unless the portal's "
            "QUOTAS_WEBHOOK_ALLOWED_NETWORKS allows it."
        ),
        request=WebhookCreateSerializer,
        responses={201: WebhookIssuedSerializer, **ERRORS},
    ),
    update=extend_schema(summary="Change a webhook (admins)", responses={200: WebhookSerializer, **ERRORS}),
    partial_update=extend_schema(
        summary="Change some fields of a webhook (admins)", responses={200: WebhookSerializer, **ERRORS}
    ),
    destroy=extend_schema(
        summary="Delete a webhook and its delivery log (admins)", responses={204: None, **ERRORS}
    ),
)
class WebhookViewSet(viewsets.ModelViewSet):
    """Tenants' webhooks. Creating one and rotating its secret show the secret once; nothing else shows it."""

    serializer_class = WebhookSerializer
    permission_classes = [permissions.IsAuthenticated, WebhookPermission]
    lookup_value_regex = r"[0-9]+"

    def get_queryset(self) -> QuerySet[Webhook]:
        rows = Webhook.objects.select_related("tenant", "created_by")
        params = self.request.query_params
        if params.get("tenant"):
            rows = rows.filter(tenant__name=params["tenant"])
        if params.get("active"):
            rows = rows.filter(active=_flag(params["active"], "active"))
        return rows

    def get_serializer_class(self) -> type[WebhookSerializer]:
        return WebhookCreateSerializer if self.action == "create" else WebhookSerializer

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = WebhookCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        secret = data.pop("secret", None) or secrets.token_urlsafe(32)
        with transaction.atomic():
            hook = Webhook.objects.create(**data, secret=secret, created_by=request.user)
            _audit(hook, request.user, "created", None, _described(hook))
        return _issued(hook, secret, status.HTTP_201_CREATED)

    def perform_update(self, serializer: serializers.BaseSerializer) -> None:
        before = _described(serializer.instance)
        with transaction.atomic():
            hook = serializer.save()
            _audit(hook, self.request.user, "changed", before, _described(hook))

    def perform_destroy(self, instance: Webhook) -> None:
        with transaction.atomic():
            _audit(instance, self.request.user, "deleted", _described(instance), None)
            instance.delete()

    @extend_schema(
        operation_id="rotate_webhook_secret",
        summary="A new signing secret for a webhook (admins); it is in this response only",
        description="The old secret stops signing at once: deliveries sent from now on use the new one.",
        request=None,
        responses={200: WebhookIssuedSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], url_path="rotate-secret", url_name="rotate-secret")
    def rotate_secret(self, request: Request, pk: str) -> Response:
        hook = self.get_object()
        secret = secrets.token_urlsafe(32)
        with transaction.atomic():
            Webhook.objects.filter(pk=hook.pk).update(secret=secret)
            _audit(hook, request.user, "secret_rotated", None, None)
        return _issued(hook, secret, status.HTTP_200_OK)

    @extend_schema(
        operation_id="ping_webhook",
        summary="Send a test event (`ping`) to a webhook (admins)",
        description="Queued like any delivery (signed, retried); 202 with its id. Sent even to an inactive webhook.",
        request=None,
        responses={202: PingSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"])
    def ping(self, request: Request, pk: str) -> Response:
        delivery = notify.ping(self.get_object(), request.user)
        return Response({"delivery": delivery.pk, "status": "queued"}, status=status.HTTP_202_ACCEPTED)


def _flag(raw: str, name: str) -> bool:
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    message = f"{name} must be true or false, got {raw!r}."
    raise ApiError("INVALID_REQUEST", message, {name: [message]})


def _choice(params: Any, name: str, choices: list[str]) -> str | None:
    raw = params.get(name, "")
    if raw and raw not in choices:
        message = f"{name} must be one of {', '.join(choices)}, got {raw!r}."
        raise ApiError("INVALID_REQUEST", message, {name: [message]})
    return raw or None


@extend_schema_view(
    list=extend_schema(
        summary="The webhook delivery log, newest first (admins and auditors)",
        description=(
            "Each event sent to each webhook: pending (being sent, or waiting for its retry at `next_attempt_at`), "
            "delivered (2xx) or failed (refused, or out of attempts), with the attempts, the last HTTP status and "
            "error. The detail adds the JSON body; no secret is kept here."
        ),
        parameters=[
            id_param("webhook", "A webhook's id."),
            OpenApiParameter("tenant", OpenApiTypes.STR, OpenApiParameter.QUERY, description="A tenant's name."),
            id_param("request", "A quota request's id."),
            id_param("subscription_request", "A subscription request's id."),
            id_param("plan_request", "A plan request's id."),
            OpenApiParameter("kind", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=list(REQUEST_FIELDS),
                             description="The kind of request the deliveries tell about."),
            OpenApiParameter("state", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=DeliveryState.values),
            OpenApiParameter("event", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=WebhookEvent.values),
        ],
        responses={200: WebhookDeliverySerializer(many=True), **LIST_ERRORS},
    ),
    retrieve=extend_schema(
        summary="One delivery, with its body", responses={200: WebhookDeliveryDetailSerializer, **ERRORS}
    ),
)
class WebhookDeliveryViewSet(
    MemoryBoundedListMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """What was sent to webhooks and how it went. Read-only: the delivery task writes it."""

    row_bytes = DELIVERY_ROW_BYTES

    serializer_class = WebhookDeliverySerializer
    permission_classes = [permissions.IsAuthenticated, WebhookPermission]
    lookup_value_regex = r"[0-9]+"

    def get_queryset(self) -> QuerySet[WebhookDelivery]:
        rows = WebhookDelivery.objects.select_related("webhook__tenant")
        params = self.request.query_params
        columns = {"webhook": "webhook"} | {field: field for field in REQUEST_FIELDS.values()}
        for name, column in columns.items():
            number = read_id(params, name)
            if number is not None:
                rows = rows.filter(**{f"{column}_id": number})
        kind = _choice(params, "kind", list(REQUEST_FIELDS))
        if kind is not None:
            rows = rows.filter(**{f"{REQUEST_FIELDS[kind]}__isnull": False})
        if params.get("tenant"):
            rows = rows.filter(webhook__tenant__name=params["tenant"])
        for name, choices in (("state", DeliveryState.values), ("event", WebhookEvent.values)):
            value = _choice(params, name, choices)
            if value is not None:
                rows = rows.filter(**{name: value})
        return rows

    def get_serializer_class(self) -> type[WebhookDeliverySerializer]:
        return WebhookDeliveryDetailSerializer if self.action == "retrieve" else WebhookDeliverySerializer
