"""``quotactl kafka-configs --help``: the client-quota options of Kafka's ``kafka-configs.sh``, in its words.

Kafka's ``ConfigCommand`` prints its options with jopt-simple's table (option, description; 78 columns) on stderr
and exits 1; so does this. The options it shares with Kafka carry Kafka's descriptions word for word (4.4, read from
Kafka's own ``--help``); ``--add-config`` lists the valid configurations of the entity types served here (users,
clients, ips), as Kafka lists them. quotactl's own options and how this mode differs follow the table.
"""

from __future__ import annotations

import textwrap
from typing import TextIO

HEADER = "This tool helps to manipulate and describe client quotas for a client, user or ip, through the quota portal"

#: (option and its argument, description): Kafka's, where the option is Kafka's. "\n\t" starts a listed name.
KAFKA_OPTIONS: list[tuple[str, str]] = [
    (
        "--add-config <String>",
        "Key Value pairs of configs to add. Square brackets can be used to group values which contain commas: "
        "'k1=v1, k2=[v1,v2,v2],k3=v3'. The following is a list of valid configurations: "
        "\nFor entity-type 'users': "
        "\n\tSCRAM-SHA-256\n\tSCRAM-SHA-512\n\tconsumer_byte_rate\n\tcontroller_mutation_rate\n\tproducer_byte_rate"
        "\n\trequest_percentage"
        "\nFor entity-type 'clients': "
        "\n\tconsumer_byte_rate\n\tcontroller_mutation_rate\n\tproducer_byte_rate\n\trequest_percentage"
        "\nFor entity-type 'ips': "
        "\n\tconnection_creation_rate"
        "\nEntity types 'users' and 'clients' may be specified together to update config for clients of a "
        "specific user.",
    ),
    ("--alter", "Alter the configuration for the entity."),
    ("--bootstrap-server <String: server to connect to>", "The Kafka servers to connect to."),
    ("--client <String>", "The client's ID."),
    ("--client-defaults", "The config defaults for all clients."),
    (
        "--command-config <String: command config property file>",
        "Property file containing configs to be passed to Admin Client. This is used only with --bootstrap-server "
        "option for describing and altering broker configs.",
    ),
    ("--delete-config <String>", "config keys to remove 'k1,k2'"),
    ("--describe", "List configs for the given entity."),
    (
        "--entity-default",
        "Default entity name for clients/users/brokers/ips (applies to corresponding entity type)",
    ),
    (
        "--entity-name <String>",
        "Name of entity (topic name/client id/user principal name/broker id/ip/client metrics/group id)",
    ),
    (
        "--entity-type <String>",
        "Type of entity (topics/clients/users/brokers/broker-loggers/ips/client-metrics/groups)",
    ),
    ("--help", "Print usage information."),
    ("--ip <String>", "The IP address."),
    ("--ip-defaults", "The config defaults for all IPs."),
    ("--user <String>", "The user's principal name."),
    ("--user-defaults", "The config defaults for all users."),
]

#: quotactl's own options (Kafka has none of these).
OWN_OPTIONS: list[tuple[str, str]] = [
    (
        "--budget-scope <String: per_broker|cluster_wide>",
        "With --add-config: per_broker, a limit on each broker (Kafka's meaning), or cluster_wide, a budget for the "
        "sum over the cluster's brokers. Left out, each value keeps its scope (per_broker when new).",
    ),
    ("--cluster <String>", "The portal's name of the cluster (default $QUOTACTL_CLUSTER, or the portal's only one)."),
    ("--portal <String: URL>", "The portal's URL, http(s)://host:port (default $QUOTACTL_PORTAL)."),
    (
        "--token <String>",
        "A personal access token of the portal (default $QUOTACTL_TOKEN; POST /api/tokens/ makes one).",
    ),
]

NOTES = (
    "Quotas are described and altered in the portal, not on the brokers: --bootstrap-server takes the portal's URL "
    "(as --portal does); an admin's --alter changes the desired state the portal pushes to every broker, and a tenant "
    "member's becomes quota requests for an admin to approve. Only the entity types users, clients and ips are "
    "served. --command-config is read (a missing file is refused, as Kafka does) but not used: the portal is reached "
    "with --token. SCRAM credentials are made in the portal (POST /api/clusters/<cluster>/scram-credentials/)."
)

#: jopt-simple's columns, as Kafka prints them: the option in 39, the description in 39, the lines after an option's
#: first indented by two.
COLUMN = 39


def _option_lines(synopsis: str) -> list[str]:
    lines = textwrap.wrap(synopsis, COLUMN - 1, subsequent_indent="  ", break_on_hyphens=False)
    return lines or [""]


def _description_lines(description: str) -> list[str]:
    lines: list[str] = []
    for part in description.split("\n"):
        if part.startswith("\t"):
            lines.append(part)  # a listed name, on a line of its own as Kafka lists them
            continue
        lines += textwrap.wrap(part, COLUMN, initial_indent="" if not lines else "  ", subsequent_indent="  ")
    return lines


def table(options: list[tuple[str, str]]) -> list[str]:
    """jopt-simple's option table (``Option`` / ``Description`` and their rules), each line 78 columns wide."""
    rows = [f"{'Option':<{COLUMN}}{'Description':<{COLUMN}}", f"{'------':<{COLUMN}}{'-----------':<{COLUMN}}"]
    for synopsis, description in options:
        left, right = _option_lines(synopsis), _description_lines(description)
        for i in range(max(len(left), len(right))):
            a = left[i] if i < len(left) else ""
            b = right[i] if i < len(right) else ""
            rows.append(f"{a:<{COLUMN}}{b:<{COLUMN}}")
    return rows


def print_help(err: TextIO) -> int:
    """Print the usage as Kafka's ConfigCommand does (on stderr) and return its exit status, 1."""
    lines = [HEADER, *table(KAFKA_OPTIONS), "", "quotactl's own options:", *table(OWN_OPTIONS), ""]
    lines += textwrap.wrap(NOTES, 2 * COLUMN)
    print("\n".join(lines), file=err)
    return 1
