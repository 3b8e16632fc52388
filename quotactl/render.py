"""What quotactl prints: the plan as a diff, the impact and capacity tables, and a progress bar (TTY only)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

SYMBOL = {"add": "+", "change": "~", "remove": "-"}
COLOR = {"add": "32", "change": "33", "remove": "31", "warn": "33;1", "bold": "1", "dim": "2", "error": "31;1"}


def use_color(stream: TextIO, forced_off: bool = False) -> bool:
    """Colors on a terminal only, and never with NO_COLOR set (https://no-color.org) or --no-color."""
    return not forced_off and "NO_COLOR" not in os.environ and stream.isatty()


class Out:
    """A stream that paints only when colors are on."""

    def __init__(self, stream: TextIO, color: bool) -> None:
        self.stream, self.color = stream, color

    def paint(self, text: str, style: str) -> str:
        return f"\033[{COLOR[style]}m{text}\033[0m" if self.color else text

    def line(self, text: str = "") -> None:
        print(text, file=self.stream)


def value_text(change: dict[str, Any], which: str) -> str:
    shown = change.get(f"{which}_display")
    value = change.get(which)
    if shown:
        return str(shown)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "-" if value is None else str(value)


SCOPE_TEXT = {"per_broker": "per broker", "cluster_wide": "cluster-wide"}


def what_text(change: dict[str, Any]) -> str:
    """A change of a value, with its budget scope where it is cluster-wide or changes (``-> cluster-wide``); a group's
    creation, deletion or member change and an exempt principal in words."""
    action, key = change.get("action", "change"), change["key"]
    if change.get("section") == "exempt":
        reason = change.get("new") if action != "remove" else change.get("old")
        said = f" ({reason})" if reason else ""
        return {"add": f"exempt from every quota{said}", "remove": f"no longer exempt{said}"}.get(
            action, f"exempt, reason: {change.get('old') or '-'} -> {change.get('new') or '-'}")
    if change.get("section") == "group" and key == "members":
        old, new = change.get("old_display") or "-", change.get("new_display") or "-"
        done = {"add": f"group created: {new}", "remove": f"group deleted: {old}"}
        return done.get(action, f"members: {old} -> {new}")
    old_scope, new_scope = change.get("old_scope"), change.get("new_scope")
    if action == "add":
        return f"{key} = {value_text(change, 'new')}" + (" (cluster-wide)" if new_scope == "cluster_wide" else "")
    if action == "remove":
        wide = " (cluster-wide)" if old_scope == "cluster_wide" else ""
        return f"{key} = {value_text(change, 'old')}{wide} (removed)"
    what = f"{key}: {value_text(change, 'old')} -> {value_text(change, 'new')}"
    if change.get("old") == change.get("new"):
        what = f"{key}: {value_text(change, 'new')}"
    if old_scope != new_scope and old_scope and new_scope:
        return f"{what}, {SCOPE_TEXT.get(old_scope, old_scope)} -> {SCOPE_TEXT.get(new_scope, new_scope)}"
    return what + (" (cluster-wide)" if new_scope == "cluster_wide" else "")


def entity_text(change: dict[str, Any]) -> str:
    if change.get("path"):
        return str(change["path"])
    entity = change.get("entity") or {}
    return ", ".join(f"{k}={v}" for k, v in entity.items()) or "?"


def print_plan(out: Out, plan: dict[str, Any]) -> None:
    """The changes, one line each (``+`` add, ``~`` change, ``-`` remove), then impact, capacity and the summary."""
    changes: list[dict[str, Any]] = plan.get("changes", [])
    stale = out.paint(" (STALE: desired state moved on; plan again)", "warn") if plan.get("stale") else ""
    out.line(
        f"Plan {plan['id']} for cluster {plan['cluster']} against desired-state version {plan['base_version']}"
        f"{', with prune' if plan.get('prune') else ''}{stale}"
    )
    if not changes:
        out.line("")
        out.line("No changes: the cluster's desired state already matches the file.")
        return
    out.line("")
    for c in changes:
        action = c.get("action", "change")
        sign = out.paint(SYMBOL.get(action, "?"), action)
        out.line(f"  {sign} {entity_text(c)}  {what_text(c)}")
        if c.get("reach"):  # groups and exempt principals: which clients the change reaches
            out.line(f"      > {c['reach']}")
        for warning in c.get("warnings") or []:
            out.line(f"      {out.paint('!', 'warn')} {warning}")
    print_impact(out, changes)
    print_capacity(out, changes)
    s = plan.get("summary") or {}
    out.line("")
    out.line(
        out.paint(
            f"Plan: {s.get('add', 0)} to add, {s.get('change', 0)} to change, {s.get('remove', 0)} to remove.", "bold"
        )
    )


def _impact_cells(impact: dict[str, Any]) -> list[str]:
    state = impact.get("state", "?")
    summary = impact.get("summary") or {}
    if state == "done" and summary:
        throttled = f"{float(summary.get('throttled_pct', 0.0)):.1f} %"
        advised = summary.get("advised") or {}
        advice = str(round(advised["quota"])) if "quota" in advised else "-"
        return [throttled, advice, str(summary.get("covered", "-"))]
    if state == "failed":
        error = impact.get("error") or {}
        return ["failed", "-", str(error.get("message") or error.get("code") or "-")]
    progress = impact.get("progress")
    label = f"{state} {float(progress) * 100:.0f} %" if isinstance(progress, int | float) and progress else state
    return [label, "-", str(impact.get("stage") or "-")]


def print_impact(out: Out, changes: Sequence[dict[str, Any]]) -> None:
    rows = [
        [entity_text(c), c["key"], value_text(c, "old"), value_text(c, "new"), *_impact_cells(c["impact"])]
        for c in changes
        if c.get("impact")
    ]
    if not rows:
        return
    out.line("")
    out.line(out.paint("Impact on landed traffic (replayed with the new quota):", "bold"))
    table(out, ["ENTITY", "KEY", "OLD", "NEW", "THROTTLED", "ADVISED", "BASED ON"], rows)


def print_capacity(out: Out, changes: Sequence[dict[str, Any]]) -> None:
    seen: dict[str, dict[str, Any]] = {}
    for c in changes:
        cap = c.get("capacity")
        if cap and cap.get("key") not in seen:
            seen[str(cap.get("key"))] = cap
    if not seen:
        return
    out.line("")
    out.line(out.paint("Capacity (granted total of the cluster, without -> with the plan):", "bold"))
    rows = []
    for key, cap in seen.items():
        limit = cap.get("capacity")
        verdict = out.paint("EXCEEDS", "error") if cap.get("exceeds") else "ok"
        rows.append(
            [
                key,
                _num(cap.get("granted_without")),
                _num(cap.get("granted_with")),
                "unknown" if limit is None else _num(limit),
                verdict,
            ]
        )
    table(out, ["KEY", "WITHOUT", "WITH", "CAPACITY", ""], rows)
    for key, cap in seen.items():
        if cap.get("budgets"):  # per-broker values x brokers, cluster-wide budgets once: say how
            out.line(f"  {key}: {cap.get('counted')}")
    for cap in seen.values():
        if cap.get("warning"):
            out.line(f"  {out.paint('!', 'warn')} {cap['warning']}")


def _num(value: Any) -> str:
    if isinstance(value, int | float):
        return f"{value:,.0f}"
    return "-" if value is None else str(value)


def table(out: Out, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(_plain(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        cells = [cell + " " * (widths[i] - len(_plain(cell))) for i, cell in enumerate(r)]
        out.line("  " + "  ".join(cells).rstrip())


def _plain(text: str) -> str:
    while "\033[" in text:
        start = text.index("\033[")
        end = text.index("m", start)
        text = text[:start] + text[end + 1 :]
    return text


class Progress:
    """A one-line progress bar on a terminal (stderr); silent elsewhere, so logs and pipes stay clean."""

    def __init__(self, label: str, stream: TextIO | None = None, width: int = 30) -> None:
        self.stream = stream or sys.stderr
        self.label, self.width = label, width
        self.enabled = self.stream.isatty()
        self.started = time.monotonic()
        self.closed = False

    def update(self, done: float, total: float, note: str = "") -> None:
        if not self.enabled:
            return
        fraction = 0.0 if total <= 0 else max(0.0, min(1.0, done / total))
        filled = int(round(fraction * self.width))
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.monotonic() - self.started
        self.stream.write(f"\r{self.label} [{bar}] {fraction * 100:3.0f}% {note} ({elapsed:.0f}s)\033[K")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and not self.closed:
            self.stream.write("\n")
            self.stream.flush()
        self.closed = True
