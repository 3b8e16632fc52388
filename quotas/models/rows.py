"""Plain SQL for the statements every quota change runs: its version row, change log, push rows, entity rows.

Why: the ORM compiles each statement anew on every call (0.1-0.3 ms of CPU each), and a one-change commit runs
about ten of them, which made the ORM most of a change's cost (``benchmarks/push_bench.py --profile``). These
helpers write the same rows the ORM would: tables and columns from the models' own metadata, every value through
its field's own ``get_db_prep_save`` (dates, JSON), the same SQL on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
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


class Pending:
    """What a statement sent in a ``pipeline`` answered, once its block has ended: its ``rows`` (none for a write
    without RETURNING) and ``count``, the number of rows it wrote (an UPDATE or DELETE)."""

    rows: list[tuple[Any, ...]]
    count: int

    def _read(self, cursor: Any) -> None:
        self.rows = [tuple(r) for r in cursor.fetchall()] if cursor.description is not None else []
        self.count = cursor.rowcount


class Pipeline:
    """Statements to run in order, sent to the server together (``pipeline``)."""

    def __init__(self, together: bool) -> None:
        self.together = together
        self._sent: list[tuple[Pending, str, Sequence[Any]]] = []

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Pending:
        """Send one statement (no trailing ``;``); its answer is the returned ``Pending``'s once the block has
        ended."""
        pending = Pending()
        if not self.together:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                pending._read(cursor)
            return pending
        self._sent.append((pending, sql, params))
        return pending

    def _send(self) -> None:
        """One query of every statement, separated by ``;``: PostgreSQL runs them in order in the transaction, the
        first error stops them (raised here, as Django's error), and answers each with a result of its own."""
        if not self._sent:
            return
        sent, self._sent = self._sent, []
        with connection.cursor() as cursor:
            cursor.execute("; ".join(sql for _, sql, _ in sent), [v for _, _, params in sent for v in params])
            for i, (pending, _, _) in enumerate(sent):
                if i:
                    cursor.nextset()
                pending._read(cursor)


@cache
def _together(kind: type, server_side_binding: bool) -> bool:
    """Several statements go in one query with psycopg 3's client-side binding (Django's default: the parameters
    are merged into the text, and the simple query protocol takes several statements); psycopg2 answers only the
    last, and server-side binding one statement per query."""
    return hasattr(kind, "pipeline") and not server_side_binding  # psycopg 3's Connection; psycopg2's has none


@contextmanager
def pipeline(commit: bool = False) -> Iterator[Pipeline]:
    """Statements sent with ``Pipeline.execute`` inside the block go to PostgreSQL together, at its end, in one
    query: the server runs them in order, one after the other as ever, but the client waits for their answers once
    instead of a round trip each; their answers are read then (``Pending``). An error in any of them is raised there
    (as Django's error, as a plain statement's would be) and the statements after it do not run. Elsewhere (SQLite,
    in-process: no round trips to save; server-side binding) each runs as it is sent.

    Nothing inside the block may wait for a statement's answer (they come at its end), and blocks do not nest (an
    inner block's statements would run before the outer one's sent earlier).

    ``commit``: the caller's next step is the end of its outermost ``transaction.atomic`` block, so the query ends
    with ``COMMIT`` and the commit costs no round trip of its own; Django's commit at the block's end then finds the
    transaction over (psycopg sends nothing). An error stops the statements after it, ``COMMIT`` included, so the
    block still rolls back whole. Inside an outer block (a savepoint) nothing is added: that block commits."""
    if getattr(connection, "_rows_pipeline", False):
        raise RuntimeError("rows.pipeline blocks do not nest")
    connection.ensure_connection()
    options = connection.settings_dict.get("OPTIONS") or {}
    together = connection.vendor == "postgresql" and _together(
        type(connection.connection), bool(options.get("server_side_binding"))
    )
    p = Pipeline(together)
    connection._rows_pipeline = True
    try:
        yield p
        if commit and together and _outermost():
            p.execute("COMMIT")
        p._send()
    finally:
        connection._rows_pipeline = False


def _outermost() -> bool:
    """Whether the transaction running is one ``transaction.atomic`` block's own, with no savepoint inside it and
    nothing marked for rollback: the only transaction a ``COMMIT`` may end."""
    return (
        connection.in_atomic_block
        and len(connection.atomic_blocks) == 1
        and not connection.savepoint_ids
        and not connection.needs_rollback
        and connection.commit_on_exit
    )


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
    model: type[models.Model], fields: Sequence[str], rows: Iterable[Sequence[Any]], returning: Sequence[str] = (),
    via: Pipeline | None = None,
) -> list[tuple[Any, ...]]:
    """Insert ``rows`` (values in the order of ``fields``) in multi-row statements; with ``returning`` (fields),
    those fields of each inserted row, in no promised order (neither database documents one): match them on
    what the rows hold. ``via``: sent in that pipeline (nothing returned)."""
    if via is not None and returning:
        raise ValueError("rows.insert: a pipeline's rows come after its block; insert with returning outside it")
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
        sql, params = head + ", ".join([one] * len(chunk)) + tail, [v for row in chunk for v in row]
        if via is not None:
            via.execute(sql, params)
            continue
        out.extend(tuple(r) for r in execute(sql, params))
    return out
