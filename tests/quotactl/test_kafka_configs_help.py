"""``quotactl kafka-configs --help`` lists the client-quota options as Kafka's own ``kafka-configs.sh --help`` does.

Both are run: Kafka's ``ConfigCommand --help`` (from the Kafka 4.4 jars, no cluster needed) and ours. Every option of
ours that Kafka has carries Kafka's description; the client-quota options Kafka lists are all in ours; the valid
configurations ours lists for users, clients and ips are Kafka's; both print on stderr and exit with the same status.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

from quotactl.cli import main

CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"  # what bin/kafka-configs.sh runs
#: The options of Kafka's for client quotas: each must be in ours.
CLIENT_QUOTA_OPTIONS = {
    "--entity-type", "--entity-name", "--entity-default", "--user", "--client", "--ip", "--user-defaults",
    "--client-defaults", "--ip-defaults", "--add-config", "--delete-config", "--alter", "--describe",
    "--bootstrap-server", "--command-config", "--help",
}
#: quotactl's own options, listed apart (Kafka has none of them).
OWN_OPTIONS = {"--portal", "--token", "--cluster", "--budget-scope"}
#: Where ours is narrower than Kafka, compared by parts: the valid configurations of the entity types served here.
SERVED_TYPES = ("users", "clients", "ips")
COLUMN = 39  # jopt-simple's option column


def options(text: str) -> dict[str, tuple[str, str]]:
    """Each table of a jopt-simple usage, option -> (its argument, its description with lines joined)."""
    found: dict[str, tuple[str, str]] = {}
    current: list[Any] | None = None
    in_table = False
    for line in text.splitlines():
        if line.startswith("------"):
            in_table = True
            continue
        if not line.strip():
            in_table = False
            continue
        if not in_table:
            continue
        left, right = line[:COLUMN].strip(), line[COLUMN:].strip()
        if line.startswith("--"):
            name, _, argument = left.partition(" ")
            current = [name, [argument], [right]]
            found[name] = ("", "")
        elif current is not None:
            current[1].append(left)
            current[2].append(right)
        if current is not None:
            found[current[0]] = (" ".join(filter(None, current[1])), " ".join(filter(None, current[2])))
    return found


def same(a: str, b: str) -> bool:
    """Equal but for where the lines were wrapped (jopt-simple breaks within words at hyphens and slashes)."""
    return "".join(a.split()) == "".join(b.split())


def valid_configs(description: str) -> tuple[str, dict[str, list[str]], str]:
    """--add-config's description: what comes before the lists, the names listed per entity type, what follows."""
    intro, *sections = re.split(r"For entity-type '([\w-]+)':", description)
    listed: dict[str, list[str]] = {}
    for entity_type, names in zip(sections[::2], sections[1::2], strict=True):
        listed[entity_type] = names.split()
    last = next(reversed(listed))
    words = listed[last]
    at = words.index("Entity")  # the sentence after the last list
    listed[last], outro = words[:at], " ".join(words[at:])
    return intro, listed, outro


def test_help_lists_kafkas_client_quota_options_in_kafkas_words(
    kafka_tool: Callable[..., Any],
) -> None:
    theirs = kafka_tool(CONFIG_COMMAND, "--help")
    out, err = io.StringIO(), io.StringIO()
    code = main(["kafka-configs", "--help"], stdout=out, stderr=err)

    assert theirs.returncode == 1 and code == theirs.returncode  # Kafka's printUsageAndExit: status 1, on stderr
    assert theirs.stdout == "" and out.getvalue() == ""
    kafka, ours = options(theirs.stderr), options(err.getvalue())
    assert len(kafka) > 25, theirs.stderr  # the parse found Kafka's table

    assert CLIENT_QUOTA_OPTIONS <= set(kafka), CLIENT_QUOTA_OPTIONS - set(kafka)
    assert CLIENT_QUOTA_OPTIONS <= set(ours), CLIENT_QUOTA_OPTIONS - set(ours)
    assert OWN_OPTIONS <= set(ours) and not OWN_OPTIONS & set(kafka)
    for name, (argument, description) in ours.items():
        if name in OWN_OPTIONS:
            continue
        assert name in kafka, f"{name} is not an option of Kafka's kafka-configs.sh"
        their_argument, their_description = kafka[name]
        assert same(argument, their_argument), (name, argument, their_argument)
        if name != "--add-config":
            assert same(description, their_description), (name, description, their_description)
    intro, listed, outro = valid_configs(ours["--add-config"][1])
    their_intro, their_listed, their_outro = valid_configs(kafka["--add-config"][1])
    assert same(intro, their_intro) and same(outro, their_outro)
    assert list(listed) == list(SERVED_TYPES)
    for entity_type in SERVED_TYPES:
        assert listed[entity_type] == their_listed[entity_type], entity_type

    # --help anywhere, and no arguments at all, print the same usage with the same status (as Kafka's)
    for argv in (["kafka-configs", "--describe", "--entity-type", "users", "--help"], ["kafka-configs"]):
        again = io.StringIO()
        assert main(argv, stdout=io.StringIO(), stderr=again) == 1 and again.getvalue() == err.getvalue()


def test_an_unknown_option_and_an_unreadable_command_config_are_refused_as_kafka_does(
    kafka_tool: Callable[..., Any], tmp_path: Any,
) -> None:
    theirs = kafka_tool(CONFIG_COMMAND, "--describe", "--bogus")
    err = io.StringIO()
    assert main(["kafka-configs", "--describe", "--bogus"], stdout=io.StringIO(), stderr=err) == theirs.returncode == 1
    assert err.getvalue().strip() == theirs.stderr.strip() == "bogus is not a recognized option"

    # Kafka fails on a --command-config it cannot read (with a stack trace); ours says so in a sentence, exit 1
    missing = tmp_path / "client.properties"
    argv = ["kafka-configs", "--portal", "http://127.0.0.1:9", "--describe", "--entity-type", "users",
            "--command-config", str(missing)]
    err = io.StringIO()
    assert main(argv, stdout=io.StringIO(), stderr=err) == 1
    assert err.getvalue().strip() == f"The --command-config file {missing} cannot be read: No such file or directory."
