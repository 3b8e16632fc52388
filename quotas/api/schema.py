"""The API's schema generation (drf-spectacular's AutoSchema), where the models say more than the serializers.

- **Nullability comes from the models.** A serializer field reading a column that may be null (``null=True``), or
  reading through a relation that may be null (``webhook.tenant.name`` when ``tenant`` may be), answers null
  sometimes, so the schema says ``nullable`` whether or not the field was declared with ``allow_null``. Declared
  fields (a ``SlugRelatedField`` over a nullable foreign key) otherwise came out as never null while the data had
  nulls. ``tests/quotas/api/test_schema_promises.py`` walks every serializer of the schema against its model.
- **Integer path parameters have the range of what they name** (a row id: 1..2**63-1), as query parameters and
  body fields do (``quotas.api.params``).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import models
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

from quotas.api.params import ID_MIN, INT64_MAX


def model_of(serializer: Any) -> type[models.Model] | None:
    """The model a serializer reads (its ``Meta.model``), or None."""
    meta = getattr(serializer, "Meta", None)
    model = getattr(meta, "model", None)
    return model if isinstance(model, type) and issubclass(model, models.Model) else None


def may_be_null(field: serializers.Field) -> bool | None:
    """Whether the model may give this field null: True when a column or relation on its source path is nullable,
    False when every step is a non-null column, None when it is not read from model columns (a method, a
    property, a nested or computed value) and the model cannot tell."""
    parent = getattr(field, "parent", None)
    if isinstance(parent, serializers.ListSerializer):
        return None
    model = model_of(parent)
    attrs = getattr(field, "source_attrs", None)
    if model is None or not attrs or field.source == "*":
        return None
    last = len(attrs) - 1
    for step, attr in enumerate(attrs):
        try:
            column = model._meta.get_field(attr)
        except FieldDoesNotExist:
            return None
        if not column.concrete:  # a reverse relation: whether it is there is the code's rule, not a column's
            return None
        if column.null:
            return True
        if column.many_to_many or not column.is_relation:
            if step < last:
                return None  # something of a list or of a value (a JSON key): not a column
        else:
            model = column.related_model
    return False


class PortalAutoSchema(AutoSchema):
    """AutoSchema with nullability from the models and bounded integer path parameters."""

    def _get_serializer_field_meta(self, field: Any, direction: str) -> dict[str, Any]:
        meta = super()._get_serializer_field_meta(field, direction)
        if isinstance(field, serializers.Field) and may_be_null(field):
            meta["nullable"] = True
        return meta

    def _resolve_path_parameters(self, variables: list[str]) -> list[dict[str, Any]]:
        parameters = super()._resolve_path_parameters(variables)
        for parameter in parameters:
            schema = parameter.get("schema", {})
            if schema.get("type") == "integer" and "maximum" not in schema:
                low = ID_MIN if parameter["name"] in ("id", "pk") else 0
                parameter["schema"] = {**schema, "format": "int64", "minimum": low, "maximum": INT64_MAX}
        return parameters
