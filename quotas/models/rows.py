"""Plain SQL for the statements every quota change runs: its version row, change log, push rows, entity rows.

Why: the ORM compiles each statement anew on every call (0.1-0.3 ms of CPU each), and a one-change commit runs
about ten of them, which made the ORM most of a change's cost (``benchmarks/push_bench.py --profile``). These
helpers write the same rows the ORM would: tables and columns from the models' own metadata, every value through
its field's own ``get_db_prep_save`` (dates, JSON), the same SQL on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, models

#: Bound parameters per statement at most (SQLite's default limit is 32766, older builds 999).
MAX_PARAMS = 900


@cache
def table(model: type[models.Model]) -> str:
    """The model's quoted table name."""
    return connection.ops.quote_name(model._meta.db_table)


@cache
def column(model: type[models.Model], name: str) -> str:
    """The quoted column of a model's field (``cluster`` -> ``"cluster_id"``)."""
    return connection.ops.quote_name(model._meta.get_field(name).column)


def execute(sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run one statement; its rows (none for a write without RETURNING)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description is not None else []


def write(sql: str, params: Sequence[Any] = ()) -> int:
    """Run one UPDATE or DELETE; the number of rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def prep(model: type[models.Model], name: str, value: Any) -> Any:
    """``value`` as the field ``name`` of ``model`` writes it (a date, JSON...)."""
    return model._meta.get_field(name).get_db_prep_save(value, connection)


@cache
def _natural(field: models.Field) -> type | None:
    """The Python type a column takes as it is (its field's preparation of such a value, or of None, is the
    identity); None for the rest (dates, JSON, decimals...), which go through ``get_db_prep_save``."""
    if isinstance(field, models.ForeignKey):
        return _natural(field.target_field)
    if isinstance(field, models.CharField | models.TextField):
        return str
    if isinstance(field, models.IntegerField):  # AutoField, PositiveIntegerField... too
        return int
    if isinstance(field, models.FloatField):
        return float
    return None


def insert(
    model: type[models.Model], fields: Sequence[str], rows: Iterable[Sequence[Any]], returning: Sequence[str] = ()
) -> list[tuple[Any, ...]]:
    """Insert ``rows`` (values in the order of ``fields``) in multi-row statements; with ``returning`` (fields),
    those fields of each inserted row, in no promised order (neither database documents one): match them on
    what the rows hold."""
    db = connections[DEFAULT_DB_ALIAS]  # resolved once: each access through the ``connection`` proxy costs a lookup
    prepared = [model._meta.get_field(f) for f in fields]
    values = [
        [
            v if v is None or type(v) is _natural(f) else f.get_db_prep_save(v, db)
            for f, v in zip(prepared, row, strict=True)
        ]
        for row in rows
    ]
    if not values:
        return []
    head = f"INSERT INTO {table(model)} ({', '.join(column(model, f) for f in fields)}) VALUES "
    tail = f" RETURNING {', '.join(column(model, f) for f in returning)}" if returning else ""
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    per = max(1, MAX_PARAMS // len(fields))
    out: list[tuple[Any, ...]] = []
    for start in range(0, len(values), per):
        chunk = values[start : start + per]
        found = execute(head + ", ".join([one] * len(chunk)) + tail, [v for row in chunk for v in row])
        out.extend(tuple(r) for r in found)
    return out
