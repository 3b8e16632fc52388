"""``quotactl kafka-configs``: the client-quota forms of Kafka's ``kafka-configs.sh``, against the portal.

Scripts move by changing one word: ``--bootstrap-server kafka:9092`` becomes ``--portal portal:8000`` (or keeps the
name ``--bootstrap-server`` with the portal's address). The arguments, their checks and what is printed follow
Kafka's ``org.apache.kafka.tools.ConfigCommand`` (4.4): ``Quota configs for user-principal 'alice' are
producer_byte_rate=1024.0`` in the order a Java HashMap iterates them, ``Completed updating config for user
alice.``, and Kafka's messages for bad arguments, on stderr with exit code 1. An admin's alter changes desired state
(pushed to the brokers like any change); a tenant member's becomes quota requests for an admin to approve, and the
command says so instead of "Completed".

Beyond Kafka's options, ``--budget-scope per_broker|cluster_wide`` with ``--add-config`` says what the added values
mean (a cluster-wide value is a budget for the sum over the cluster's brokers; left out, a value keeps its scope),
and ``--describe`` adds a line ``Cluster-wide budgets for user-principal 'alice' are producer_byte_rate`` after an
entity's Kafka line when it holds any (Kafka's own line is unchanged: it shows each budget's value, as Kafka does).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from quotactl.client import Portal, PortalError, cluster_path
from quotactl.javafmt import broker_value_order, entity_hash, hash_order, java_double, string_hash
from quotactl.kafka_configs_help import print_help

USERS, CLIENTS, IPS = "users", "clients", "ips"
API_TYPE = {USERS: "user", CLIENTS: "client-id", IPS: "ip"}
DEFAULT = "<default>"
CLIENT_QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
IP_KEYS = ("connection_creation_rate",)
SCRAM_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
ALL_TYPES = ("topics", "clients", "users", "brokers", "broker-loggers", "ips", "client-metrics", "groups")
CONFIG_KEY = re.compile(r"[$a-zA-Z0-9._-]*")
OPTIONS_WITH_VALUE = {
    "--bootstrap-server",
    "--portal",
    "--token",
    "--cluster",
    "--entity-type",
    "--entity-name",
    "--add-config",
    "--delete-config",
    "--user",
    "--client",
    "--ip",
    "--command-config",
    "--bootstrap-controller",
    "--add-config-file",
    "--budget-scope",
}
BUDGET_SCOPES = ("per_broker", "cluster_wide")
FLAGS = {
    "--describe",
    "--alter",
    "--entity-default",
    "--user-defaults",
    "--client-defaults",
    "--ip-defaults",
    "--all",
    "--help",
    "--version",
}


class CommandError(Exception):
    """A refusal in Kafka's words (ConfigCommand's IllegalArgumentException / InvalidConfigurationException)."""


@dataclass
class Args:
    portal: str | None = None
    token: str | None = None
    cluster: str | None = None
    describe: bool = False
    alter: bool = False
    types: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # "" = the default entity, as Kafka's entityNames()
    add_config: str | None = None
    delete_config: list[str] = field(default_factory=list)
    budget_scope: str | None = None
    command_config: str | None = None
    help: bool = False
    flags_used: bool = False
    entity_opts_used: bool = False


def parse(argv: Sequence[str]) -> Args:
    """ConfigCommand's options, in its order-sensitive way: the n-th ``--entity-name``/``--entity-default`` goes with
    the n-th ``--entity-type``; ``--user``/``--client``/``--ip`` and the ``--*-defaults`` flags come after them."""
    a = Args()
    flag_types: list[str] = []
    flag_names: list[str] = []
    default_flags: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in OPTIONS_WITH_VALUE:
            if eq:
                value = inline
            else:
                if i + 1 >= len(argv):
                    raise CommandError(f"Option {name} requires an argument")
                i += 1
                value = argv[i]
            if name in ("--bootstrap-server", "--portal"):
                a.portal = value
            elif name == "--token":
                a.token = value
            elif name == "--cluster":
                a.cluster = value
            elif name == "--entity-type":
                a.types.append(value)
                a.entity_opts_used = True
            elif name == "--entity-name":
                a.names.append(value)
                a.entity_opts_used = True
            elif name == "--add-config":
                a.add_config = value
            elif name == "--delete-config":
                a.delete_config.extend(k.strip() for k in value.split(","))
            elif name == "--budget-scope":
                a.budget_scope = value
            elif name in ("--user", "--client", "--ip"):
                flag_types.append({"--user": USERS, "--client": CLIENTS, "--ip": IPS}[name])
                flag_names.append(value)
                a.flags_used = True
            elif name == "--command-config":
                a.command_config = value
            else:
                raise CommandError(f"{name} is not supported by quotactl kafka-configs (client quotas only).")
        elif name in FLAGS:
            if name == "--describe":
                a.describe = True
            elif name == "--alter":
                a.alter = True
            elif name == "--entity-default":
                a.names.append("")
                a.entity_opts_used = True
            elif name in ("--user-defaults", "--client-defaults", "--ip-defaults"):
                default_flags.append(
                    {"--user-defaults": USERS, "--client-defaults": CLIENTS, "--ip-defaults": IPS}[name]
                )
                a.flags_used = True
            elif name == "--help":
                a.help = True
            elif name == "--all":
                raise CommandError(
                    "--all applies to broker and topic configs, which quotactl kafka-configs does not "
                    "describe; use the portal's broker-configs API."
                )
            else:
                raise CommandError(
                    "usage: quotactl kafka-configs --portal URL --describe|--alter --entity-type "
                    "users|clients|ips --entity-name NAME|--entity-default [--add-config k=v,...] "
                    "[--budget-scope per_broker|cluster_wide] [--delete-config k,...]"
                )
        else:
            raise CommandError(f"{arg.lstrip('-') if arg.startswith('-') else arg} is not a recognized option")
        i += 1
    # entityTypes(): --entity-type values, then the flags (entity flags in Kafka's order, then the default flags)
    order = [CLIENTS, USERS, IPS]
    ordered_flags = sorted(zip(flag_types, flag_names, strict=True), key=lambda p: order.index(p[0]))
    default_order = [CLIENTS, USERS, IPS]
    ordered_defaults = sorted(default_flags, key=default_order.index)
    a.types += [t for t, _ in ordered_flags] + ordered_defaults
    a.names += [n for _, n in ordered_flags] + ["" for _ in ordered_defaults]
    return a


def check(a: Args) -> None:
    """ConfigCommandOptions.checkArgs, for the forms this mode serves (same messages)."""
    if int(a.describe) + int(a.alter) != 1:
        raise CommandError("Command must include exactly one action: --describe, --alter")
    if a.describe and (a.add_config is not None or a.delete_config):
        raise CommandError('Option "describe" can\'t be used with option "add-config" or "delete-config"')
    if a.budget_scope is not None:
        if a.budget_scope not in BUDGET_SCOPES:
            raise CommandError(f"--budget-scope is per_broker or cluster_wide, not {a.budget_scope}")
        if a.add_config is None:
            raise CommandError("--budget-scope says what the values of --add-config mean; give --add-config with it")
    seen: set[str] = set()
    duplicates = [t for t in a.types if t in seen or seen.add(t)]  # type: ignore[func-returns-value]
    if duplicates:
        raise CommandError("Duplicate entity type(s) specified: " + ",".join(dict.fromkeys(duplicates)))
    if not a.portal:
        raise CommandError(
            "Either --portal (or --bootstrap-server with the portal's address) or QUOTACTL_PORTAL must be specified."
        )
    for t in a.types:
        if t not in ALL_TYPES:
            raise CommandError(
                f"Invalid entity type {t}, the entity type must be one of {', '.join(ALL_TYPES)} "
                "with a --bootstrap-server or --bootstrap-controller argument"
            )
        if t not in (USERS, CLIENTS, IPS):
            raise CommandError(
                f"quotactl kafka-configs serves client quotas (users, clients, ips), not {t}; the "
                "portal's API has broker configs and client-metrics subscriptions."
            )
    if not a.types:
        raise CommandError("At least one entity type must be specified")
    if len(a.types) > 1 and set(a.types) != {USERS, CLIENTS}:
        raise CommandError("Only 'users' and 'clients' entity types may be specified together")
    if a.entity_opts_used and a.flags_used:
        raise CommandError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    if IPS in a.types:
        for name in a.names:
            if name and not _ip_like(name):
                raise CommandError(
                    f"The entity name for {a.types[0]} must be a valid IP or resolvable host, but it is: {name}"
                )
    if a.alter:
        if not any(a.names):
            if "" not in a.names:
                raise CommandError(
                    "An entity-name or default entity must be specified with --alter of users, clients, brokers or ips"
                )
        if a.add_config is None and not a.delete_config:
            raise CommandError(
                "At least one of --add-config, --add-config-file, or --delete-config must be specified with --alter"
            )
        if len(a.types) != len(a.names):
            raise CommandError("An entity name must be specified for every entity type")
    if len(a.names) > len(a.types):
        raise CommandError("More entity names specified than entity types")
    if a.command_config is not None:
        # Kafka refuses a file it cannot read; its Admin Client settings have no use here (the portal takes --token)
        try:
            with open(a.command_config, "rb"):
                pass
        except OSError as e:
            raise CommandError(f"The --command-config file {a.command_config} cannot be read: {e.strerror}.") from None


def _ip_like(name: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return bool(re.fullmatch(r"[A-Za-z0-9.-]+", name))


def parse_add_config(text: str | None) -> dict[str, str]:
    """``k=v,k2=v2`` (square brackets group values with commas), as ConfigCommand splits it."""
    if text is None:
        return {}
    pattern = r"(?=[^\]]*(?:\[|$))"
    pairs = [re.split(r"\s*=\s*" + pattern, part) for part in re.split("," + pattern, text)]
    if any(len(p) != 2 for p in pairs):
        raise CommandError(
            'Invalid entity config: all configs to be added must be in the format "key=val" or  '
            '"key=[val1,val2]" to group values which contain commas.'
        )
    configs: dict[str, str] = {}
    for key, value in pairs:
        key = key.strip()
        if not CONFIG_KEY.fullmatch(key):
            raise CommandError(f"Invalid character found for config key: {key}")
        configs[key] = re.sub(r"\[?\]?", "", value).strip()
    return configs


def components(a: Args) -> list[dict[str, object]]:
    """The describe filter: a name matches exactly, the default the default entity, no name any named entity."""
    out: list[dict[str, object]] = []
    for i, t in enumerate(a.types):
        if i >= len(a.names):
            out.append({"entity_type": API_TYPE[t], "match_type": "specified"})
        elif a.names[i] == "":
            out.append({"entity_type": API_TYPE[t], "match_type": "default"})
        else:
            out.append({"entity_type": API_TYPE[t], "match_type": "exact", "match": a.names[i]})
    return out


Entry = tuple[dict[str, str | None], dict[str, float], list[str]]


def describe_entries(portal: Portal, cluster: str, a: Args) -> list[Entry]:
    """Each described entity, its values and the keys whose values are cluster-wide budgets."""
    body = {"components": components(a), "strict": True}
    rows = portal.pages("POST", cluster_path(cluster, "client-quotas/describe"), body)
    entries = []
    for row in rows:
        entity = {k: (None if v == DEFAULT else v) for k, v in (row.get("entity") or {}).items()}
        budgets = sorted(k for k, scope in (row.get("budget_scopes") or {}).items() if scope == "cluster_wide")
        entries.append((entity, {k: float(v) for k, v in (row.get("values") or {}).items()}, budgets))
    return entries


def _entity_text(entity: dict[str, str | None]) -> str:
    parts = []
    for key, label in (("user", "user-principal"), ("client-id", "client-id"), ("ip", "ip")):
        if key in entity:
            name = entity[key]
            parts.append(f"the default {label}" if not name else f"{label} '{name}'")
    return ", ".join(parts)


def quota_line(entity: dict[str, str | None], values: dict[str, float]) -> str:
    """One line of ``describeQuotaConfigs``: user, client-id and ip parts, then the values in HashMap order."""
    keys = hash_order(broker_value_order(values), string_hash)
    return f"Quota configs for {_entity_text(entity)} are " + ", ".join(f"{k}={java_double(values[k])}" for k in keys)


def budget_line(entity: dict[str, str | None], budgets: list[str]) -> str:
    """The portal's line after Kafka's: which of the entity's values are budgets for the sum over the brokers."""
    return f"Cluster-wide budgets for {_entity_text(entity)} are {','.join(budgets)} (shared out between the brokers)"


def describe(portal: Portal, cluster: str, a: Args, out: TextIO) -> None:
    entries = describe_entries(portal, cluster, a)
    for entity, values, budgets in hash_order(entries, lambda e: entity_hash(e[0])):
        print(quota_line(entity, values), file=out)
        if budgets:
            print(budget_line(entity, budgets), file=out)
    if CLIENTS not in a.types and "" not in a.names and a.types[0] == USERS:
        for user in a.names or []:
            _scram_line(portal, cluster, user, out)


def _scram_line(portal: Portal, cluster: str, user: str, out: TextIO) -> None:
    """Kafka also prints a user's SCRAM credentials (mechanism and iterations): the ones the portal made."""
    try:
        rows = portal.get(cluster_path(cluster, f"scram-credentials/{user}/"))
    except PortalError:
        return  # none, or none this caller may see: Kafka prints nothing for a user without credentials
    if rows:
        text = ", ".join(f"{r['mechanism']}=iterations={r['iterations']}" for r in rows)
        print(f"SCRAM credential configs for user-principal '{user}' are {text}", file=out)


def alter(portal: Portal, cluster: str, a: Args, out: TextIO) -> None:
    added = parse_add_config(a.add_config)
    deleted = a.delete_config
    head = a.types[0]
    if head in (USERS, CLIENTS):
        unknown_add = [k for k in added if k not in CLIENT_QUOTA_KEYS and k not in SCRAM_KEYS]
        unknown_del = [k for k in deleted if k not in CLIENT_QUOTA_KEYS and k not in SCRAM_KEYS]
        scram = [k for k in [*added, *deleted] if k in SCRAM_KEYS]
        if head == CLIENTS or len(a.types) == 2:
            if unknown_add or [k for k in added if k in SCRAM_KEYS]:
                raise CommandError(
                    "Only quota configs can be added for 'clients' using --bootstrap-server. "
                    "Unexpected config names: " + ",".join(unknown_add + [k for k in added if k in SCRAM_KEYS])
                )
            if unknown_del or [k for k in deleted if k in SCRAM_KEYS]:
                raise CommandError(
                    "Only quota configs can be deleted for 'clients' using --bootstrap-server. "
                    "Unexpected config names: " + ",".join(unknown_del + [k for k in deleted if k in SCRAM_KEYS])
                )
        else:
            if unknown_add:
                raise CommandError(
                    "Only quota and SCRAM credential configs can be added for 'users' using "
                    "--bootstrap-server. Unexpected config names: " + ",".join(unknown_add)
                )
            if unknown_del:
                raise CommandError(
                    "Only quota and SCRAM credential configs can be deleted for 'users' using "
                    "--bootstrap-server. Unexpected config names: " + ",".join(unknown_del)
                )
            if scram:
                raise CommandError(
                    "SCRAM credentials are made in the portal (POST /api/clusters/<cluster>/"
                    "scram-credentials/), which keeps who owns them; quotactl kafka-configs alters quotas."
                )
    else:
        unknown = [k for k in [*added, *deleted] if k not in IP_KEYS]
        if unknown:
            raise CommandError(
                "Only connection quota configs can be added for 'ips' using --bootstrap-server. "
                "Unexpected config names: " + ", ".join(unknown)
            )
    current = describe_entries(portal, cluster, a)
    old = current[0][1] if current else {}
    if a.budget_scope is not None and head == IPS:
        raise CommandError("--budget-scope is for user and client-id quotas: an ip's connection rate is per broker.")
    invalid = [k for k in deleted if k not in old]
    if invalid:
        raise CommandError("Invalid config(s): " + ",".join(invalid))
    ops: list[dict[str, object]] = []
    for key, value in added.items():
        try:
            number = float(value)
        except ValueError:
            raise CommandError(f"Cannot parse quota configuration value for {key}: {value}") from None
        op: dict[str, object] = {"key": key, "value": number}
        if a.budget_scope is not None:
            op["budget_scope"] = a.budget_scope
        ops.append(op)
    ops += [{"key": key, "remove": True} for key in deleted]
    entity = [{"entity_type": API_TYPE[t], "name": n or None} for t, n in zip(a.types, a.names, strict=True)]
    try:
        portal.post(cluster_path(cluster, "client-quotas/alter"), {"entries": [{"entity": entity, "ops": ops}]})
    except PortalError as e:
        if e.code != "PERMISSION_DENIED":
            raise
        _request_instead(portal, cluster, a, added, deleted, out)
        return
    name = a.names[0]
    if name:
        print(f"Completed updating config for {head[:-1]} {name}.", file=out)
    else:
        print(f"Completed updating default config for {head} in the cluster.", file=out)


def _request_instead(
    portal: Portal, cluster: str, a: Args, added: dict[str, str], deleted: list[str], out: TextIO
) -> None:
    """A tenant member may not alter quotas: each added key becomes a quota request for an admin to approve."""
    if deleted:
        raise CommandError(
            "Only admins delete quota configs; ask an admin, or plan a quota file without the key "
            "(quotactl plan --prune) and apply it as a request."
        )
    if IPS in a.types:
        raise CommandError("Ip quotas belong to no tenant: only admins alter them.")
    names = dict(zip(a.types, a.names, strict=True))
    user = names.get(USERS)
    client = names.get(CLIENTS)
    ids = []
    for key, value in added.items():
        body = {
            "cluster": cluster,
            "user": DEFAULT if user == "" else user,
            "client_id": DEFAULT if client == "" else client,
            "key": key,
            "value": float(value),
            "reason": "quotactl kafka-configs --alter",
        }
        if a.budget_scope is not None:
            body["budget_scope"] = a.budget_scope
        ids.append(str(portal.post("/api/requests/", body)["id"]))
    label = a.types[0][:-1]
    who = a.names[0] or "default"
    print(
        f"Requested config update for {label} {who}: request(s) {', '.join(ids)} wait for an admin's approval.",
        file=out,
    )


def run(
    argv: Sequence[str],
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    portal_default: str | None = None,
    token_default: str | None = None,
) -> int:
    """The whole mode; Kafka's exit codes (0 done, 1 refused) and its messages on stderr."""
    try:
        a = parse(argv)
        if a.help or not argv:  # as Kafka: the usage on stderr, exit 1
            return print_help(err)
        a.portal = a.portal or portal_default or os.environ.get("QUOTACTL_PORTAL")
        check(a)
        portal = Portal(a.portal or "", a.token or token_default or os.environ.get("QUOTACTL_TOKEN"))
        cluster = a.cluster or os.environ.get("QUOTACTL_CLUSTER") or _only_cluster(portal)
        if a.alter:
            alter(portal, cluster, a, out)
        else:
            describe(portal, cluster, a, out)
    except CommandError as e:
        print(str(e), file=err)
        return 1
    except PortalError as e:
        print(f"Error from the portal: {e.code}: {e.message}", file=err)
        return 1
    return 0


def _only_cluster(portal: Portal) -> str:
    rows = portal.pages("GET", "/api/clusters/")
    if len(rows) == 1:
        return str(rows[0]["name"])
    names = ", ".join(r["name"] for r in rows) or "none"
    raise CommandError(f"Name the cluster with --cluster or QUOTACTL_CLUSTER (the portal has: {names}).")
