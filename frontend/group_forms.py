"""Forms of the group and exempt-principal pages.

They only shape what a browser sends; ``quotas.models.group_changes`` and ``quotas.workflow.quota_requests`` judge it,
and their refusal (``InvalidGroup``, ``GroupOverlap``, a workflow error) goes beside the field it names
(``refuse``), so a page and an API call are refused for the same reasons with the same sentences.
"""

from __future__ import annotations

import re
from typing import Any

from django import forms

from engine.groups import GROUP_KEYS
from engine.units import BYTE_RATE_FORMS, UnitError, parse_quota_value
from quotas.choices import BudgetScope
from quotas.models import GroupKind, Tenant

#: Principals as typed in a box: one a line, or separated by commas or spaces (a principal holds none of them).
SEPARATORS = re.compile(r"[\s,]+")


def principal_list(text: str) -> list[str]:
    """The principals typed in a box, in order, each once."""
    return list(dict.fromkeys(p for p in SEPARATORS.split(text or "") if p))


def refuse(form: forms.Form, field: str | None, message: str) -> None:
    """The domain's sentence beside the field it names, or above the form when the form has no such field."""
    form.add_error(field if field in form.fields else None, message)


class PrincipalsField(forms.CharField):
    """Principals, one a line (or comma-separated)."""

    widget = forms.Textarea(attrs={"rows": 3, "autocomplete": "off", "spellcheck": "false"})

    def clean(self, value: Any) -> Any:
        return principal_list(super().clean(value))


class GroupForm(forms.Form):
    """An admin makes a group on a cluster; ``create_group`` judges it."""

    tenant = forms.ModelChoiceField(Tenant.objects.order_by("name"), to_field_name="name", label="Tenant",
                                    empty_label="Choose a tenant")
    name = forms.CharField(label="Name", max_length=64,
                           help_text="Letters, digits, '.', '_' and '-'; unique on the cluster.")
    kind = forms.ChoiceField(label="Who is a member", choices=GroupKind.choices)
    principals = PrincipalsField(label="Principals", required=False,
                                 help_text="One a line, each owned by the tenant.")
    client_id_prefix = forms.CharField(label="Client-id prefix", required=False, max_length=255,
                                       help_text="What its clients' ids start with.")
    prefix_principal = forms.CharField(label="Only under principal (optional)", required=False, max_length=255,
                                       help_text="One principal of the tenant; empty: any principal.")
    description = forms.CharField(label="Description", required=False, max_length=200)


class MembersForm(forms.Form):
    """An admin changes who a group holds (its kind and name stay); ``update_members`` judges it."""

    principals = PrincipalsField(label="Principals", required=False, help_text="One a line, each owned by the tenant.")
    client_id_prefix = forms.CharField(label="Client-id prefix", required=False, max_length=255)
    prefix_principal = forms.CharField(label="Only under principal (optional)", required=False, max_length=255)

    def __init__(self, *args: Any, kind: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # a group's kind stays: only its own fields are asked
        for name in (("client_id_prefix", "prefix_principal") if kind == GroupKind.PRINCIPALS else ("principals",)):
            del self.fields[name]


class GroupRequestForm(forms.Form):
    """A member of the group's tenant asks for one of its values; ``quota_requests.submit`` judges it."""

    key = forms.ChoiceField(label="Quota key", choices=[(k, k) for k in GROUP_KEYS])
    value = forms.CharField(
        label="Value",
        max_length=64,
        help_text=f"Byte rates: {BYTE_RATE_FORMS}. request_percentage: percent (50 or 50 %). "
        "controller_mutation_rate: mutations/s (10), per broker only.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "data-quota-value": "id_key",
                                      "aria-describedby": "value-understood"}),
    )
    budget_scope = forms.ChoiceField(
        label="Budget scope",
        required=False,
        choices=[("", "Keep the value's scope"), *BudgetScope.choices],
        help_text="Per broker: the group's limit on each broker. Cluster-wide: a budget for the group's sum over the "
        "cluster's brokers (not for controller_mutation_rate: Kafka's controller enforces it once). Keep: the scope "
        "the value has now (per broker when new).",
    )
    reason = forms.CharField(label="Reason", required=False, widget=forms.Textarea(attrs={"rows": 2}),
                             help_text="What the admin reads.")

    def clean(self) -> dict[str, Any]:
        """A value in a form the key does not take says only what is wrong with it, as the request form does: the
        field's help text lists the accepted forms, which the workflow's sentence repeats for API callers."""
        cleaned = super().clean()
        if cleaned.get("key") and cleaned.get("value"):
            try:
                parse_quota_value(cleaned["key"], cleaned["value"].strip())
            except UnitError as e:
                self.add_error("value", f"{e.problem}; write it in one of the forms listed above.")
        return cleaned


class ExemptForm(forms.Form):
    """An admin exempts a principal from every quota of the cluster; ``set_exempt`` judges it."""

    principal = forms.CharField(label="Principal", max_length=255)
    reason = forms.CharField(label="Reason", required=False, max_length=200,
                             help_text="Why no quota applies to it (a replicator, the portal's own user).")


class ConfirmForm(forms.Form):
    """A removal that asks to be meant: the box ticked (``label`` says what goes)."""

    confirm = forms.BooleanField(required=True, error_messages={"required": "Tick the box to confirm."})

    def __init__(self, *args: Any, label: str, **kwargs: Any) -> None:
        super().__init__(*args, label_suffix="", **kwargs)
        self.fields["confirm"].label = label
