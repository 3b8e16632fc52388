"""``quotactl groups`` and ``quotactl exempt``: a cluster's group quotas and exempt principals, one change at a time.

    quotactl groups list     --cluster C
    quotactl groups describe --cluster C NAME
    quotactl groups create   --cluster C NAME --tenant T (--tenant-principals | --principals a,b |
                             --client-id-prefix P [--principal X]) [--description D]
    quotactl groups set      --cluster C NAME [--set KEY=VALUE[:SCOPE]]... [--unset KEY]...
    quotactl groups request  --cluster C NAME --set KEY=VALUE[:SCOPE] [--reason R]   (a member: for approval)
    quotactl groups delete   --cluster C NAME
    quotactl exempt list|add|remove --cluster C [PRINCIPAL] [--reason R]

VALUE takes binary units for byte rates (``3MiB/s``); SCOPE is per_broker or cluster_wide (left out: the scope the
value has). Each command is one change of the cluster's desired state (a quota file changes many at once:
``quotactl plan``).
"""

from __future__ import annotations

import argparse
import re
import urllib.parse
from typing import Any

from quotactl.client import Portal, cluster_path
from quotactl.render import SCOPE_TEXT, Out, table

EXIT_OK, EXIT_ERROR = 0, 1
GROUP_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")


class Usage(Exception):
    """A mistake in the command line (exit 1, the message printed)."""


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """The ``groups`` and ``exempt`` subcommands."""
    groups = sub.add_parser("groups", parents=[common], help="a cluster's group quotas (list, create, set, ...)")
    g = groups.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (("list", "the cluster's groups"), ("describe", "one group, its members and values"),
                       ("create", "make a group (no values yet)"), ("set", "set or remove a group's values (admins)"),
                       ("request", "ask for a group's value (a tenant member; an admin approves)"),
                       ("delete", "delete a group: its members fall back to their own quotas")):
        p = g.add_parser(name, parents=[common], help=text)
        p.add_argument("--cluster", required=True)
        if name != "list":
            p.add_argument("name", help="the group's name")
        if name == "create":
            p.add_argument("--tenant", required=True, help="the tenant owning the group")
            who = p.add_mutually_exclusive_group(required=True)
            who.add_argument("--tenant-principals", action="store_true", help="every principal the tenant owns")
            who.add_argument("--principals", help="a comma-separated list of principals")
            who.add_argument("--client-id-prefix", help="clients whose client-id starts with this")
            p.add_argument("--principal", default="", help="with --client-id-prefix: only under this principal")
            p.add_argument("--description", default="")
        if name in ("set", "request"):
            p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE[:SCOPE]", dest="sets")
        if name == "set":
            p.add_argument("--unset", action="append", default=[], metavar="KEY", help="remove the group's KEY")
        if name == "request":
            p.add_argument("--reason", default="")
    exempt = sub.add_parser("exempt", parents=[common], help="a cluster's exempt principals (list, add, remove)")
    e = exempt.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (("list", "the principals no quota applies to"), ("add", "exempt a principal from every quota"),
                       ("remove", "make a principal's quotas apply again")):
        p = e.add_parser(name, parents=[common], help=text)
        p.add_argument("--cluster", required=True)
        if name != "list":
            p.add_argument("principal")
        if name == "add":
            p.add_argument("--reason", default="", help="why (kept with it: inter-broker, a replicator, ...)")


def ops_of(sets: list[str], unsets: list[str] | None = None) -> list[dict[str, Any]]:
    """``KEY=VALUE[:SCOPE]`` and ``KEY`` (removed) as the values endpoint's ops ``[{key, value, budget_scope}]``."""
    ops: list[dict[str, Any]] = []
    for text in sets:
        key, sep, rest = text.partition("=")
        if not sep or not rest:
            raise Usage(f"--set takes KEY=VALUE[:SCOPE], not {text!r}")
        value, _, scope = rest.partition(":")
        if scope and scope not in SCOPE_TEXT:
            raise Usage(f"a scope is per_broker or cluster_wide, not {scope!r}")
        ops.append({"key": _key(key), "value": _number(key, value), "budget_scope": scope or None})
    ops.extend({"key": _key(key), "value": None, "budget_scope": None} for key in unsets or [])
    if not ops:
        raise Usage("name a change: --set KEY=VALUE[:SCOPE] or --unset KEY")
    return ops


def _key(key: str) -> str:
    if key not in GROUP_KEYS:
        raise Usage(f"a group holds {', '.join(GROUP_KEYS)}, not {key!r}")
    return key


#: Binary units of a byte rate, as the quota file and the request form take them.
UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
_VALUE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KkMmGg][Ii])?([Bb])?(/[Ss])?\s*$")


def _number(key: str, text: str) -> int | float:
    """A value as the portal's group API takes it: a number (a byte rate may carry a binary unit, ``3MiB/s``)."""
    found = _VALUE.match(text)
    unit = ((found.group(2) or "") + (found.group(3) or "")).lower() if found else ""
    if found is None or (unit and key == "request_percentage") or unit not in UNITS:
        raise Usage(f"{key} takes a number{' with a unit such as 3MiB/s' if key != 'request_percentage' else ''}, "
                    f"not {text!r}")
    value = float(found.group(1)) * UNITS[unit]
    return int(value) if value.is_integer() else value


def _rows(answer: Any) -> list[dict[str, Any]]:
    return list(answer.get("results", [])) if isinstance(answer, dict) else list(answer or [])


def _group_path(cluster: str, name: str, rest: str = "") -> str:
    return cluster_path(cluster, f"groups/{urllib.parse.quote(name, safe='')}/{rest}")


def members_text(group: dict[str, Any]) -> str:
    """Who a group holds, as the portal says it (or from its kind and fields)."""
    for field in ("members_text", "members"):
        if isinstance(group.get(field), str):
            return str(group[field])
    kind = group.get("kind")
    if kind == "tenant":
        return f"the principals tenant {group.get('tenant')} owns"
    if kind == "principals":
        return "principals " + ", ".join(group.get("principals") or [])
    under = f" of principal {group['prefix_principal']}" if group.get("prefix_principal") else ""
    return f"client-ids starting {group.get('client_id_prefix')!r}{under}"


def values_of(group: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, value, scope) of a group's values, however the answer lists them."""
    raw = group.get("values") or []
    rows = [{"key": k, **(v if isinstance(v, dict) else {"value": v})} for k, v in raw.items()] \
        if isinstance(raw, dict) else raw
    out = []
    for row in rows:
        shown = row.get("display") or row.get("value_display") or row.get("value")
        if isinstance(shown, float) and shown.is_integer():
            shown = int(shown)
        out.append((str(row.get("key")), str(shown), SCOPE_TEXT.get(row.get("budget_scope") or "per_broker", "?")))
    return sorted(out)


def run(portal: Portal, args: argparse.Namespace, out: Out, err: Out) -> int:
    """One ``groups`` or ``exempt`` action."""
    if args.command == "exempt":
        return _exempt(portal, args, out)
    c = args.cluster
    if args.action == "list":
        groups = _rows(portal.get(cluster_path(c, "groups/")))
        if not groups:
            out.line(f"Cluster {c} has no groups.")
            return EXIT_OK
        table(out, ["NAME", "TENANT", "MEMBERS", "VALUES"], [
            [str(g.get("name")), str(g.get("tenant")), members_text(g),
             ", ".join(f"{k}={v}" + (" (cluster-wide)" if s == "cluster-wide" else "") for k, v, s in values_of(g))
             or "-"] for g in groups])
    elif args.action == "describe":
        g = portal.get(_group_path(c, args.name))
        out.line(f"Group {g.get('name')} on cluster {c}, tenant {g.get('tenant')}")
        out.line(f"  members: {members_text(g)}")
        if g.get("description"):
            out.line(f"  description: {g['description']}")
        rows = [[k, v, s] for k, v, s in values_of(g)]
        if rows:
            table(out, ["KEY", "VALUE", "SCOPE"], rows)
        else:
            out.line("  no values: the group holds nobody back until one is set")
    elif args.action == "create":
        kind = "tenant" if args.tenant_principals else "principals" if args.principals else "client_prefix"
        if args.principal and kind != "client_prefix":
            raise Usage("--principal goes with --client-id-prefix")
        body: dict[str, Any] = {"name": args.name, "tenant": args.tenant, "kind": kind,
                                "description": args.description}
        if kind == "principals":  # only the kind's own fields: the API refuses a blank prefix
            body["principals"] = [p.strip() for p in args.principals.split(",") if p.strip()]
        elif kind == "client_prefix":
            body.update(client_id_prefix=args.client_id_prefix, prefix_principal=args.principal)
        g = portal.post(cluster_path(c, "groups/"), body)
        out.line(f"Created group {args.name} on cluster {c}: {members_text(g or body)}.")
    elif args.action == "set":
        answer = portal.post(_group_path(c, args.name, "values"), {"ops": ops_of(args.sets, args.unset)}) or {}
        version = answer.get("version") if isinstance(answer, dict) else None
        said = f" (desired-state version {version})" if version else ""
        out.line(f"Set the values of group {args.name} on cluster {c}{said}.")
    elif args.action == "request":
        for op in ops_of(args.sets):
            body = {"cluster": c, "group": args.name, "key": op["key"], "value": op["value"],
                    "budget_scope": op["budget_scope"], "reason": args.reason}
            made = portal.post("/api/requests/", body) or {}
            out.line(f"Requested {op['key']}={op['value']} for group {args.name}: request {made.get('id')} "
                     f"({made.get('state', 'submitted')}); an admin approves or rejects it.")
    elif args.action == "delete":
        portal.call("DELETE", _group_path(c, args.name))
        out.line(f"Deleted group {args.name} on cluster {c}: its members fall back to their own quotas.")
    return EXIT_OK


def _exempt(portal: Portal, args: argparse.Namespace, out: Out) -> int:
    c = args.cluster
    if args.action == "list":
        rows = _rows(portal.get(cluster_path(c, "exempt-principals/")))
        if not rows:
            out.line(f"Cluster {c} exempts no principal.")
            return EXIT_OK
        table(out, ["PRINCIPAL", "REASON"], [[str(r.get("principal")), str(r.get("reason") or "-")] for r in rows])
    elif args.action == "add":
        portal.post(cluster_path(c, "exempt-principals/"), {"principal": args.principal, "reason": args.reason})
        out.line(f"Principal {args.principal} is exempt from every quota of cluster {c}.")
    else:
        portal.call("DELETE", cluster_path(c, f"exempt-principals/{urllib.parse.quote(args.principal, safe='')}/"))
        out.line(f"Principal {args.principal}'s quotas apply again on cluster {c}.")
    return EXIT_OK
