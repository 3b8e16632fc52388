"""Group quotas and exempt principals in a quota file: read with their lines, written in a stable order, compared.

::

    groups:                                   # one quota for several clients, by name
      - name: payments
        tenant: payments                      # the tenant that owns the group
        members: {tenant: true}               # or {principals: [a, b]}, or {clientIdPrefix: "pay-", principal: x}
        producer_byte_rate: {value: 3 MiB/s, budgetScope: cluster_wide}
        consumer_byte_rate: 8 MiB/s
    exemptPrincipals:                         # principals no quota applies to
      - {principal: replicator, reason: MirrorMaker 2}

A group listed is its whole state (values it leaves out are removed); one left out is removed only with prune.
The precedence a group takes among Kafka's levels is ``engine.groups``' (docs/capabilities/group-quotas.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from engine.entities import validate_quota_value
from engine.errors import QuotaEngineError
from engine.groups import GROUP_KEYS, PER_BROKER_ONLY, check_name
from engine.units import format_quota_value, parse_quota_value
from quotafile import common as _qf

GROUP, EXEMPT = "group", "exempt"
#: The change of a group's membership (``add``: the group is created, ``remove``: deleted) and of its description.
MEMBERS, DESCRIPTION = "members", "description"
GROUP_FIELDS = ("name", "tenant", "members", "description", *GROUP_KEYS)
TENANT, PRINCIPALS, CLIENT_PREFIX = "tenant", "principals", "client_prefix"
MEMBER_FORMS = "{tenant: true}, {principals: [a, b]} or {clientIdPrefix: pay-, principal: svc-x}"
EXEMPT_FIELDS = ("principal", "reason")


@dataclass
class Group:
    """One group as the file holds it: owner, members (one of three kinds), values and their budget scopes."""

    name: str
    tenant: str
    kind: str = TENANT
    principals: tuple[str, ...] = ()
    client_id_prefix: str = ""
    prefix_principal: str = ""
    description: str = ""
    values: dict[str, float] = field(default_factory=dict)
    cluster_wide: set[str] = field(default_factory=set)

    def members(self) -> dict[str, Any]:
        """Who the group holds and who owns it (a plan's ``members`` old/new): a change of any is a member change."""
        out: dict[str, Any] = {"tenant": self.tenant, "kind": self.kind}
        if self.kind == PRINCIPALS:
            out["principals"] = sorted(self.principals)
        elif self.kind == CLIENT_PREFIX:
            out["clientIdPrefix"] = self.client_id_prefix
            if self.prefix_principal:
                out["principal"] = self.prefix_principal
        return out

    def scope(self, key: str) -> str | None:
        if key not in self.values:
            return None
        return _qf.CLUSTER_WIDE if key in self.cluster_wide else _qf.PER_BROKER


def members_text(members: dict[str, Any] | None) -> str | None:
    """Who a group holds, in words (as ``QuotaGroup.members_text`` says it)."""
    if members is None:
        return None
    kind = members.get("kind")
    if kind == TENANT:
        return f"the principals tenant {members['tenant']} owns"
    if kind == PRINCIPALS:
        return "principals " + ", ".join(members.get("principals", []))
    under = f" of principal {members['principal']}" if members.get("principal") else ""
    return f"client-ids starting {members.get('clientIdPrefix')!r}{under}"


def who(members: dict[str, Any]) -> str:
    """The clients a group holds, in words."""
    kind = members.get("kind")
    if kind == TENANT:
        return f"the clients of every principal tenant {members.get('tenant')} owns"
    if kind == PRINCIPALS:
        return "the clients of principals " + ", ".join(members.get("principals", []))
    under = f" of principal {members['principal']}" if members.get("principal") else " of any principal"
    return f"the clients whose client-id starts {members.get('clientIdPrefix')!r}{under}"


def reach(members: dict[str, Any], key: str | None = None) -> str:
    """Which clients a change of the group reaches, in words (a value at a level naming a client wins over it)."""
    what = f"{key} " if key else ""
    return (f"Reaches {who(members)}, together under one {what}quota, except those with a {what}quota of their own "
            "at a level naming them (user and/or client-id) and exempt principals.")


# ------------------------------------------------------------------ reading


def read_groups(r: Any, node: yaml.Node, state: Any) -> dict[str, Group]:
    """The ``groups`` section (``r``: the package's reader, collecting errors with their lines)."""
    out: dict[str, Group] = {}
    for i, item in enumerate(r.sequence(node, "groups") or []):
        where = f"groups[{i}]"
        pairs = r.mapping(item, where)
        if pairs is None:
            continue
        fields = {k: (kn, vn) for k, kn, vn in pairs}
        for k, kn, _ in pairs:
            if k not in GROUP_FIELDS:
                r.error(kn, k, f"Unknown key {k!r} in {where}; a group has {', '.join(GROUP_FIELDS)}.")
        name = _text(r, fields, "name", item, f"{where} has no name; write name: <group name>.")
        if name is None:
            continue
        try:
            check_name(name)
        except QuotaEngineError as e:
            r.error(fields["name"][1], "name", f"{e.message} Rename the group.")
            continue
        if name in out:
            r.error(fields["name"][1], "name", f"Group {name!r} is listed twice (line "
                                               f"{state.lines[('groups', name)]}); give each group once.")
            continue
        state.lines[("groups", name)] = _qf._line(item)
        tenant = _text(r, fields, "tenant", item, f"Group {name!r} has no tenant; write tenant: <the owning tenant>.")
        group = Group(name, tenant or "")
        if "description" in fields:
            description = r.scalar(fields["description"][1], "description")
            group.description = "" if description is None else str(description)
            if len(group.description) > 200:
                r.error(fields["description"][1], "description", "A description is at most 200 characters.")
        if "members" not in fields:
            r.error(item, "members", f"Group {name!r} has no members; write members: {MEMBER_FORMS}.")
        else:
            state.lines[("groups", name, MEMBERS)] = _qf._line(fields["members"][0])
            _read_members(r, fields["members"][1], group)
        for key in GROUP_KEYS:
            if key in fields:
                state.lines[("groups", name, key)] = _qf._line(fields[key][0])
                _read_value(r, fields[key][1], group, key)
        out[name] = group
    return out


def _text(r: Any, fields: dict[str, Any], key: str, item: yaml.Node, missing: str) -> str | None:
    if key not in fields:
        r.error(item, key, missing)
        return None
    value = r.scalar(fields[key][1], key)
    if not isinstance(value, str) or not value.strip():
        r.error(fields[key][1], key, f"{key} must be text.")
        return None
    return value


def _read_members(r: Any, node: yaml.Node, group: Group) -> None:
    pairs = r.mapping(node, "members")
    if pairs is None:
        return
    given = {k: (kn, vn) for k, kn, vn in pairs}
    forms = [k for k in ("tenant", "principals", "clientIdPrefix") if k in given]
    unknown = [k for k in given if k not in ("tenant", "principals", "clientIdPrefix", "principal")]
    if unknown or len(forms) != 1 or ("principal" in given and forms != ["clientIdPrefix"]):
        r.error(node, "members", f"members is one of {MEMBER_FORMS}.")
        return
    if forms == ["tenant"]:
        if r.scalar(given["tenant"][1], "tenant") is not True:
            r.error(given["tenant"][1], "members", "members: {tenant: true} holds the tenant's principals; write "
                                                   "true, or list principals instead.")
        group.kind = TENANT
    elif forms == ["principals"]:
        names = [r.scalar(n, "principals") for n in r.sequence(given["principals"][1], "principals") or []]
        if not names or any(not isinstance(n, str) or not n.strip() for n in names):
            r.error(given["principals"][1], "principals", "principals is a list of at least one principal name.")
            return
        if len(set(names)) != len(names):
            r.error(given["principals"][1], "principals", "A principal is listed twice; give each once.")
            return
        group.kind, group.principals = PRINCIPALS, tuple(names)
    else:
        prefix = r.scalar(given["clientIdPrefix"][1], "clientIdPrefix")
        if not isinstance(prefix, str | int) or isinstance(prefix, bool) or not str(prefix):
            r.error(given["clientIdPrefix"][1], "clientIdPrefix", "clientIdPrefix is the text the members' "
                                                                  "client-ids start with.")
            return
        group.kind, group.client_id_prefix = CLIENT_PREFIX, str(prefix)
        if "principal" in given:
            under = r.scalar(given["principal"][1], "principal")
            if not isinstance(under, str) or not under.strip():
                r.error(given["principal"][1], "principal", "principal is the one principal the prefix is under; "
                                                            "leave it out for any principal.")
                return
            group.prefix_principal = under


def _read_value(r: Any, node: yaml.Node, group: Group, key: str) -> None:
    scope: object = _qf.PER_BROKER
    if isinstance(node, yaml.MappingNode):
        fields = {k: (kn, vn) for k, kn, vn in r.mapping(node, key) or []}
        for name, (kn, _) in fields.items():
            if name not in _qf.VALUE_FIELDS:
                r.error(kn, key, f"Unknown key {name!r} in {key}; a value with a scope is {{value: ..., "
                                 "budgetScope: per_broker|cluster_wide}.")
        if "value" not in fields:
            r.error(node, key, f"{key} has no value; write {{value: ..., budgetScope: cluster_wide}}.")
            return
        if "budgetScope" in fields:
            scope = r.scalar(fields["budgetScope"][1], "budgetScope")
            if scope not in _qf.BUDGET_SCOPES:
                r.error(fields["budgetScope"][1], key, f"budgetScope is per_broker or cluster_wide, not {scope!r}; "
                                                       "leave it out for per_broker.")
                return
            if scope == _qf.CLUSTER_WIDE and key in PER_BROKER_ONLY:
                r.error(fields["budgetScope"][1], key, f"A group's {key} is per_broker only: Kafka's controller "
                                                       "enforces it once for the whole cluster; leave budgetScope out.")
                return
        node = fields["value"][1]
    raw = r.scalar(node, key)
    if raw is None:
        if isinstance(node, yaml.ScalarNode):
            r.error(node, key, f"{key} has no value; to remove the group's {key} leave the key out.")
        return
    try:
        group.values[key] = validate_quota_value(key, parse_quota_value(key, raw))
    except QuotaEngineError as e:
        r.error(node, key, e.message)
        return
    if scope == _qf.CLUSTER_WIDE:
        group.cluster_wide.add(key)


def read_exempt(r: Any, node: yaml.Node, state: Any) -> dict[str, str]:
    """The ``exemptPrincipals`` section: principal -> reason (a plain name is a principal without a reason)."""
    out: dict[str, str] = {}
    for i, item in enumerate(r.sequence(node, "exemptPrincipals") or []):
        where = f"exemptPrincipals[{i}]"
        if isinstance(item, yaml.ScalarNode):
            principal, reason = r.scalar(item, "principal"), ""
        else:
            pairs = r.mapping(item, where)
            if pairs is None:
                continue
            fields = {k: (kn, vn) for k, kn, vn in pairs}
            for k, kn, _ in pairs:
                if k not in EXEMPT_FIELDS:
                    r.error(kn, k, f"Unknown key {k!r} in {where}; an exempt principal has principal and reason.")
            if "principal" not in fields:
                r.error(item, "principal", f"{where} has no principal; write {{principal: <name>, reason: ...}}.")
                continue
            principal = r.scalar(fields["principal"][1], "principal")
            reason = r.scalar(fields["reason"][1], "reason") if "reason" in fields else ""
            reason = "" if reason is None else str(reason)
        if not isinstance(principal, str) or not principal.strip():
            r.error(item, "principal", f"{where}: the principal must be a name.")
            continue
        if principal in out:
            r.error(item, "principal", f"Principal {principal!r} is listed twice; give each once.")
            continue
        if len(reason) > 200:
            r.error(item, "reason", "A reason is at most 200 characters.")
            continue
        state.lines[("exemptPrincipals", principal)] = _qf._line(item)
        out[principal] = reason
    return out


# ------------------------------------------------------------------ writing


def group_doc(group: Group) -> dict[str, Any]:
    """A group as the file writes it (members and scoped values in flow style)."""
    members: dict[str, Any]
    if group.kind == TENANT:
        members = {"tenant": True}
    elif group.kind == PRINCIPALS:
        members = {"principals": sorted(group.principals)}
    else:
        members = {"clientIdPrefix": group.client_id_prefix}
        if group.prefix_principal:
            members["principal"] = group.prefix_principal
    out: dict[str, Any] = {"name": group.name, "tenant": group.tenant, "members": _qf._Flow(members)}
    if group.description:
        out["description"] = group.description
    for key in GROUP_KEYS:
        if key in group.values:
            value = _qf.human_value(key, group.values[key])
            out[key] = _qf._Flow({"value": value, "budgetScope": _qf.CLUSTER_WIDE}) if key in group.cluster_wide \
                else value
    return out


def exempt_doc(exempt: dict[str, str]) -> list[dict[str, str]]:
    return [_qf._Flow({"principal": p, **({"reason": exempt[p]} if exempt[p] else {})}) for p in sorted(exempt)]


# ------------------------------------------------------------------ comparing


def diff_groups(current: Any, desired: Any, prune: bool, allowed: Any) -> list[_qf.Change]:
    """The changes of groups and exempt principals (``Change`` of sections ``group`` and ``exempt``), by name."""
    changes = []
    if desired.groups is not None:
        have = current.groups or {}
        for name in set(have) | set(desired.groups):
            old, new = have.get(name), desired.groups.get(name)
            if new is None and not (prune and allowed(GROUP, name)):
                continue
            before_m = None if old is None else old.members()
            after_m = None if new is None else new.members()
            if before_m != after_m:
                action = _qf.ADD if old is None else _qf.REMOVE if new is None else _qf.CHANGE
                changes.append(_group_change(action, name, MEMBERS, before_m, after_m, 0))
            before_d = None if old is None else old.description or None
            after_d = None if new is None else new.description or None
            if before_d != after_d and new is not None:
                action = _qf.ADD if before_d is None else _qf.REMOVE if after_d is None else _qf.CHANGE
                changes.append(_group_change(action, name, DESCRIPTION, before_d, after_d, 1))
            for rank, key in enumerate(GROUP_KEYS, start=2):
                b = None if old is None else old.values.get(key)
                a = None if new is None else new.values.get(key)
                b_scope = None if old is None else old.scope(key)
                a_scope = None if new is None else new.scope(key)
                if (b, b_scope) == (a, a_scope):
                    continue
                action = _qf.ADD if b is None else _qf.REMOVE if a is None else _qf.CHANGE
                changes.append(_group_change(action, name, key, _qf._number(key, b), _qf._number(key, a), rank,
                                             old_scope=b_scope, new_scope=a_scope))
    if desired.exempt is not None:
        have_e = current.exempt or {}
        for principal in set(have_e) | set(desired.exempt):
            b, a = have_e.get(principal), desired.exempt.get(principal)
            if b == a or (a is None and not (prune and allowed(EXEMPT, principal))):
                continue
            action = _qf.ADD if b is None else _qf.REMOVE if a is None else _qf.CHANGE
            changes.append(_qf.Change(action, EXEMPT, {"principal": principal}, EXEMPT, b, a,
                                      f"/users/{principal}", (5, principal)))
    for c in changes:
        change_display(c, c.shown)
    return changes


def _group_change(action: str, name: str, key: str, old: Any, new: Any, rank: int, **scopes: Any) -> _qf.Change:
    return _qf.Change(action, GROUP, {GROUP: name}, key, old, new, f"/groups/{name}", (4, name, rank, key), **scopes)


def change_display(change: _qf.Change, out: dict[str, Any]) -> None:
    """A group change's ``old_display``/``new_display`` (and scopes) and ``reach``; an exempt change's ``reach``."""
    if change.section == EXEMPT:
        for side in ("old", "new"):
            reason = getattr(change, side)
            out[f"{side}_display"] = None if reason is None else "exempt" + (f" ({reason})" if reason else "")
        out["reach"] = (f"No quota applies to the clients of principal {change.entity['principal']} any more (its "
                        "own, its groups' and the defaults)." if change.old is None else
                        f"The clients of principal {change.entity['principal']} get their quotas again."
                        if change.new is None else None)
        return
    if change.key == MEMBERS:
        out["old_display"], out["new_display"] = members_text(change.old), members_text(change.new)
        members = change.new or change.old
        out["reach"] = (reach(members) if change.old is None else
                        f"Deleted: {who(members)} fall back to their own quotas (or Kafka's defaults)."
                        if change.new is None else
                        f"Members from {members_text(change.old)} to {members_text(change.new)}; "
                        + reach(change.new))
    elif change.key in GROUP_KEYS:
        out["old_display"] = None if change.old is None else format_quota_value(change.key, change.old)
        out["new_display"] = None if change.new is None else format_quota_value(change.key, change.new)
        out["old_scope"], out["new_scope"] = change.old_scope, change.new_scope


# ------------------------------------------------------------------ JSON Schema


def schema(value: Any) -> dict[str, Any]:
    """The JSON Schema of the ``groups`` and ``exemptPrincipals`` sections (``value``: a scoped value's schema)."""
    text = {"type": "string", "minLength": 1}
    members = {"oneOf": [
        {"type": "object", "required": ["tenant"], "additionalProperties": False,
         "properties": {"tenant": {"const": True}}, "description": "The principals the group's tenant owns."},
        {"type": "object", "required": ["principals"], "additionalProperties": False,
         "properties": {"principals": {"type": "array", "minItems": 1, "uniqueItems": True, "items": text}}},
        {"type": "object", "required": ["clientIdPrefix"], "additionalProperties": False,
         "properties": {"clientIdPrefix": text, "principal": text},
         "description": "Clients whose client-id starts with the prefix (under one principal, or any)."},
    ]}
    return {
        "groups": {
            "type": ["array", "null"],
            "description": "Group quotas: one quota shared by several clients (Kafka and per-broker engine clusters).",
            "items": {
                "type": "object",
                "required": ["name", "tenant", "members"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "pattern": r"^[A-Za-z0-9._-]{1,64}$"},
                    "tenant": text,
                    "members": members,
                    "description": {"type": "string", "maxLength": 200},
                    **{key: value(key) for key in GROUP_KEYS},
                },
            },
        },
        "exemptPrincipals": {
            "type": ["array", "null"],
            "description": "Principals no quota applies to (inter-broker, replicators).",
            "items": {"oneOf": [text, {
                "type": "object", "required": ["principal"], "additionalProperties": False,
                "properties": {"principal": text, "reason": {"type": "string", "maxLength": 200}},
            }]},
        },
    }
