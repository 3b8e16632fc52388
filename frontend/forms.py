"""Forms of the HTML pages.

The request form only shapes what a browser sends (every value arrives as text) into the body the API
receives; the API's own serializer and then ``quotas.workflow.quota_requests.submit`` judge it, so a page and an API
call are refused for the same reasons with the same messages. No rule is restated here: the value goes as the
text typed (``1.5 MiB/s``), which the API parses (``engine.units``), and a member of one tenant is
not asked which (the workflow infers it).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import AbstractBaseUser

from engine.entities import QuotaType
from engine.units import BYTE_RATE_FORMS, UnitError, parse_quota_value
from quotas.api.serializers.requests import QuotaRequestCreateSerializer
from quotas.choices import BudgetScope
from quotas.models import Cluster, RequestState, tenants_of

#: The keys a user/client-id request can name (connection_creation_rate is for ip entities, set by admins).
CLIENT_KEYS = [qt.config_key for qt in QuotaType]


class EntitySearchForm(forms.Form):
    """The entity list's filters: free text over the names and an optional cluster."""

    q = forms.CharField(
        label="Search",
        required=False,
        max_length=255,
        help_text="Part of a principal, client-id, ip or cluster name.",
        widget=forms.TextInput(attrs={"type": "search", "autocomplete": "off"}),
    )
    cluster = forms.ChoiceField(label="Cluster", required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = Cluster.objects.values_list("name", flat=True)
        self.fields["cluster"].choices = [("", "All clusters"), *((n, n) for n in names)]


class RequestFilterForm(forms.Form):
    """The request list's filter by state."""

    state = forms.ChoiceField(label="State", required=False, choices=[("", "Any state"), *RequestState.choices])


class AuditFilterForm(forms.Form):
    """The audit log's filters, the same the API offers (request id, tenant name) plus cluster."""

    tenant = forms.CharField(label="Tenant", required=False, max_length=64)
    cluster = forms.CharField(label="Cluster", required=False, max_length=64)
    request = forms.IntegerField(label="Request #", required=False, min_value=1)


class QuotaRequestForm(forms.Form):
    """Ask for one quota key on a user/client-id entity; validated by the API's serializer and the workflow."""

    tenant = forms.CharField(label="Tenant", required=False, widget=forms.Select(attrs={"required": True}))
    cluster = forms.CharField(label="Cluster", required=False, widget=forms.Select(attrs={"required": True}))
    user = forms.CharField(
        label="Principal (user)",
        required=False,
        help_text="A principal your tenant owns; leave empty for a client-id alone.",
    )
    client_id = forms.CharField(
        label="Client-id",
        required=False,
        help_text="A client-id your tenant owns, or &lt;default&gt; under an owned principal; may be empty.",
    )
    key = forms.CharField(
        label="Quota key",
        required=False,
        widget=forms.Select(choices=[(k, k) for k in CLIENT_KEYS], attrs={"required": True}),
    )
    value = forms.CharField(
        label="Value",
        required=False,
        help_text=f"Byte rates: {BYTE_RATE_FORMS}. request_percentage: percent (50 or 50 %); "
        "controller_mutation_rate: mutations/s.",
        widget=forms.TextInput(
            attrs={
                "required": True,
                "autocomplete": "off",
                "data-quota-value": "id_key",  # units.js shows what it understood, for the key chosen there
                "aria-describedby": "value-understood",
            }
        ),
    )
    budget_scope = forms.CharField(
        label="Budget scope",
        required=False,
        help_text="Per broker: the limit on each broker (Kafka's meaning: a client using 3 brokers gets up to 3 times "
        "the value). Cluster-wide: a budget for the sum over the cluster's brokers (byte rates and "
        "request_percentage of a Kafka cluster). Keep: the scope the value has now (per broker when new).",
        widget=forms.Select(choices=[("", "Keep the value's scope"), *BudgetScope.choices]),
    )
    reason = forms.CharField(
        label="Reason", required=False, widget=forms.Textarea(attrs={"rows": 3}), help_text="What the admin reads."
    )
    expires_at = forms.CharField(
        label="Boost until (UTC, optional)",
        required=False,
        help_text="Makes it a time-boxed boost: the previous value returns then.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )

    def __init__(self, *args: Any, actor: AbstractBaseUser, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tenants = list(tenants_of(actor).order_by("name").values_list("name", flat=True))
        #: A member of one tenant is never asked which: the page names it and the workflow infers it.
        self.only_tenant = tenants[0] if len(tenants) == 1 else None
        self.fields["tenant"].widget.choices = [("", "Choose a tenant"), *((t, t) for t in tenants)]
        clusters = list(Cluster.objects.values_list("name", flat=True))
        self.fields["cluster"].widget.choices = [("", "Choose a cluster"), *((c, c) for c in clusters)]
        self.validated: dict[str, Any] | None = None

    def api_body(self) -> dict[str, Any]:
        """The JSON body the API would get: empty optional fields absent, the value as typed (the API parses it)."""
        data = self.cleaned_data
        body: dict[str, Any] = {"reason": data.get("reason", "")}
        for name in ("tenant", "cluster", "user", "client_id", "key", "expires_at", "budget_scope"):
            if data.get(name):
                body[name] = data[name]
        if data.get("value", "").strip():
            body["value"] = data["value"].strip()
        return body

    def clean(self) -> dict[str, Any]:
        """Run the API's serializer on the body; its field errors become this form's, one message per field.

        A value in a form the key does not take says only what is wrong with it: the field's help text lists the
        accepted forms, which the API's message repeats for callers that have no help text.
        """
        cleaned = super().clean()
        body = self.api_body()
        try:
            parse_quota_value(body.get("key", ""), body.get("value"))
        except UnitError as e:
            self.add_error("value", f"{e.problem}; write it in one of the forms listed above.")
        serializer = QuotaRequestCreateSerializer(data=body)
        if serializer.is_valid():
            self.validated = dict(serializer.validated_data)
        else:
            for name, errors in serializer.errors.items():
                field = name if name in self.fields else None
                if field is not None and field in self.errors:
                    continue  # one message a field: the first says what to change
                for error in errors if isinstance(errors, list) else [errors]:
                    self.add_error(field, str(error))
        return cleaned


class DecisionForm(forms.Form):
    """A comment on a decision or withdrawal; whether it is required is the workflow's call (reject needs one)."""

    comment = forms.CharField(label="Comment", required=False, widget=forms.Textarea(attrs={"rows": 2}))
    confirm_stale = forms.BooleanField(required=False, label="Approve although the value changed since submission")
    superseded = forms.BooleanField(required=False, label="Reject as superseded")


class ReapplyForm(forms.Form):
    """The drift page's re-apply button: a cluster and one of its brokers (empty: the cluster-wide namespace)."""

    cluster = forms.CharField(max_length=64)
    broker = forms.IntegerField(required=False, min_value=0)
