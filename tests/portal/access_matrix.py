"""The access matrices' tables (``test_access_matrix.py`` for HTTP, ``test_access_matrix_ws.py`` for the WebSockets):
one row per thing asked and object, one cell per role, parsed the same way for both."""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("admin", "auditor", "A", "B", "anon")


@dataclass(frozen=True)
class Row:
    """What is asked (an HTTP ``method`` and ``path``, or a WebSocket ``path`` and ``action``), of which object, and
    the cell each role expects."""

    path: str
    obj: str
    expected: dict[str, str]
    method: str = ""
    action: str = ""


def parse(table: str, asked: tuple[str, str]) -> list[Row]:
    """The rows of ``table``: whitespace-separated columns, the two named by ``asked`` (``("method", "path")`` or
    ``("path", "action")``), the object, then one cell per role in ``ROLES``; blank and ``#`` lines skipped."""
    rows = []
    for line in table.strip().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        first, second, obj, *cells = line.split()
        assert len(cells) == len(ROLES), f"row {line!r}: {len(cells)} cells for {len(ROLES)} roles"
        rows.append(Row(obj=obj, expected=dict(zip(ROLES, cells, strict=True)),
                        **dict(zip(asked, (first, second), strict=True))))
    return rows


def differences(got: dict[str, str], row: Row) -> str:
    """Each role's cell as observed, with the table's where the two differ: the line a failing row prints."""
    return "  ".join(f"{role}={got[role]}" + (f" (table: {row.expected[role]})" if got[role] != row.expected[role]
                                              else "") for role in ROLES)
