"""Admin for the quota models: clusters with their brokers and listeners, and a read-mostly view of quotas.

Quota values are changed through the API (AlterClientQuotas), which validates them with the
engine and bumps the desired-state version; the admin therefore shows them read-only.
"""

import secrets

from django import forms
from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

from quotas.models import (
    AuditEntry,
    Broker,
    BrokerConfig,
    Cluster,
    DesiredStateVersion,
    Listener,
    OwnedName,
    QuotaEntity,
    QuotaRequest,
    QuotaValue,
    ScramCredential,
    Tenant,
    TopicConfig,
    Webhook,
    WebhookDelivery,
)
from quotas.models.webhook_destinations import ForbiddenDestination, check_url


class BrokerInline(admin.TabularInline):
    model = Broker
    extra = 0


class ListenerInline(admin.TabularInline):
    model = Listener
    extra = 0


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "connector", "scope", "capacity_in_bytes_per_s", "capacity_out_bytes_per_s"]
    list_filter = ["connector", "scope"]
    search_fields = ["name", "description"]
    inlines = [BrokerInline, ListenerInline]


class QuotaValueInline(admin.TabularInline):
    model = QuotaValue
    extra = 0
    fields = ["key", "value", "budget_scope"]
    readonly_fields = ["key", "value", "budget_scope"]
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(QuotaEntity)
class QuotaEntityAdmin(admin.ModelAdmin):
    """Read-only: changes go through AlterClientQuotas so they are validated and versioned."""

    list_display = ["__str__", "cluster", "user", "client_id", "ip"]
    list_filter = ["cluster"]
    search_fields = ["user", "client_id", "ip"]
    readonly_fields = ["cluster", "user", "client_id", "ip"]
    inlines = [QuotaValueInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(DesiredStateVersion)
class DesiredStateVersionAdmin(admin.ModelAdmin):
    list_display = ["cluster", "version", "updated"]
    readonly_fields = ["cluster", "version", "updated"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(BrokerConfig)
class BrokerConfigAdmin(admin.ModelAdmin):
    """Read-only: changes go through the broker-configs API, which validates, versions and audits them."""

    list_display = ["cluster", "broker", "key", "value", "updated"]
    list_filter = ["cluster"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(TopicConfig)
class TopicConfigAdmin(BrokerConfigAdmin):
    list_display = ["cluster", "topic", "key", "value", "updated"]


class OwnedNameInline(admin.TabularInline):
    model = OwnedName
    extra = 0


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "description"]
    search_fields = ["name", "owned_names__pattern"]
    filter_horizontal = ["members"]
    inlines = [OwnedNameInline]


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows changed only by the workflow (requests) or never (audit): the admin shows them."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(QuotaRequest)
class QuotaRequestAdmin(ReadOnlyAdmin):
    list_display = ["pk", "tenant", "cluster", "entity", "key", "value", "state", "expires_at", "requested_by"]
    list_filter = ["state", "tenant", "cluster"]


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ["created", "actor_name", "action", "tenant", "cluster", "entity", "key", "before", "after"]
    list_filter = ["action", "tenant", "cluster"]


@admin.register(ScramCredential)
class ScramCredentialAdmin(ReadOnlyAdmin):
    """Who has SCRAM credentials and when they were set; changed only through quotas.scram (Kafka holds them)."""

    list_display = ["cluster", "user", "mechanism", "iterations", "tenant", "created", "created_by_name", "rotated",
                    "rotated_by_name"]
    list_filter = ["cluster", "mechanism", "tenant"]
    search_fields = ["user"]


class WebhookForm(forms.ModelForm):
    """The secret is write-only: typed when adding (or to replace it), never shown back."""

    url = forms.URLField(max_length=1000, assume_scheme="https", help_text="The http(s) URL POSTed to.")
    new_secret = forms.CharField(
        label="Secret", required=False, min_length=16, max_length=256, strip=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="The HMAC-SHA256 signing key the receiver checks. Adding: leave empty to have one generated (it is "
        "then shown nowhere: rotate it through the API to learn one). Changing: leave empty to keep it.",
    )

    class Meta:
        model = Webhook
        fields = ["tenant", "name", "url", "events", "active"]

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        try:
            check_url(url)
        except ForbiddenDestination as e:
            raise forms.ValidationError(str(e), code=e.code) from None
        return url


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    """Tenants' webhooks; the secret is never displayed (``quotas.api.webhooks`` shows it once when made)."""

    form = WebhookForm
    list_display = ["name", "tenant", "active", "created", "created_by"]
    list_filter = ["active", "tenant"]
    search_fields = ["name", "tenant__name"]

    def save_model(self, request: HttpRequest, obj: Webhook, form: WebhookForm, change: bool) -> None:
        typed = form.cleaned_data.get("new_secret")
        if typed:
            obj.secret = typed
        elif not obj.secret:
            obj.secret = secrets.token_urlsafe(32)
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    """The delivery log: written by the delivery task only."""

    list_display = ["pk", "created", "webhook", "event", "kind", "request", "subscription_request", "plan_request",
                    "state", "attempts", "status_code", "last_attempt_at", "delivered_at"]
    list_filter = ["state", "event", "webhook__tenant"]
