"""``quotactl``: quotas as code against the portal's API, and a ``kafka-configs.sh``-compatible mode.

    quotactl [--portal URL] [--token TOKEN] export --cluster C [-o FILE]
    quotactl plan  --cluster C -f FILE [--prune] [--detailed-exitcode] [--wait-impact SECONDS]
    quotactl apply --cluster C -f FILE [--prune] [--yes] [--wait] | apply --plan-id N [--yes] [--wait]
    quotactl kafka-configs --portal URL --describe|--alter --entity-type users|clients|ips ...
    quotactl groups list|describe|create|set|request|delete --cluster C ...   (see quotactl/groups.py)
    quotactl exempt list|add|remove --cluster C [PRINCIPAL]

Configuration: ``--portal`` or ``QUOTACTL_PORTAL`` (the portal's base URL), ``--token`` or ``QUOTACTL_TOKEN`` (a
personal access token from POST /api/tokens/).

Exit codes: 0 done (plan: with --detailed-exitcode, no changes); 1 an error (the API's typed message is printed,
never a traceback: a bad file names its line and key; a stale plan says to plan again); 2 plan with
--detailed-exitcode found changes (as ``terraform plan -detailed-exitcode``); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from quotactl import groups, kafka_configs
from quotactl.client import Portal, PortalError, cluster_path
from quotactl.render import Out, Progress, print_plan, use_color

EXIT_OK, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2
#: Impact previews and pushes are polled this often while waiting.
POLL_S = 0.5


class Usage(Exception):
    """A mistake in the command line itself (exit 1, the message printed)."""


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--portal", default=argparse.SUPPRESS, help="the portal's base URL (env QUOTACTL_PORTAL)")
    common.add_argument("--token", default=argparse.SUPPRESS, help="a personal access token (env QUOTACTL_TOKEN)")
    common.add_argument("--no-color", action="store_true", default=argparse.SUPPRESS, help="never color the output")

    parser = argparse.ArgumentParser(
        prog="quotactl", parents=[common], description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    export = sub.add_parser("export", parents=[common], help="write a cluster's quota state as a YAML file")
    export.add_argument("--cluster", required=True)
    export.add_argument("-o", "--output", help="the file to write (default: standard output)")

    def planning(p: argparse.ArgumentParser) -> None:
        p.add_argument("--cluster", help="the cluster (default: the file's `cluster:`)")
        p.add_argument("-f", "--file", help="the quota file (YAML); - for standard input")
        p.add_argument("--prune", action="store_true", help="also remove entities the file leaves out")
        p.add_argument("--tenant", help="a member of several tenants names the one the plan is for")
        p.add_argument(
            "--wait-impact",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="wait up to this long for the impact previews (default 0: show their state now)",
        )

    plan = sub.add_parser("plan", parents=[common], help="show what a quota file would change, with its impact")
    planning(plan)
    plan.add_argument("--detailed-exitcode", action="store_true", help="exit 2 when the plan has changes")

    apply = sub.add_parser("apply", parents=[common], help="plan a quota file and apply it (members: as a request)")
    planning(apply)
    apply.add_argument("--plan-id", type=int, help="apply this stored plan instead of planning a file")
    apply.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    apply.add_argument("--reason", default="", help="why (kept with a member's request)")
    apply.add_argument("--wait", action="store_true", help="wait until the brokers answer the new version")
    apply.add_argument("--wait-timeout", type=float, default=120.0, metavar="SECONDS")

    groups.add_parsers(sub, common)
    sub.add_parser(
        "kafka-configs",
        help="kafka-configs.sh's client-quota forms (see quotactl kafka-configs --help)",
        add_help=False,
    )
    return parser


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """The console script (``quotactl``) and ``python -m quotactl``."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    out_stream, err_stream = stdout or sys.stdout, stderr or sys.stderr
    try:
        if "kafka-configs" in args_list:
            at = args_list.index("kafka-configs")
            pre = build_parser().parse_args(args_list[:at])
            return kafka_configs.run(
                args_list[at + 1 :],
                out_stream,
                err_stream,
                portal_default=getattr(pre, "portal", None),
                token_default=getattr(pre, "token", None),
            )
        args = build_parser().parse_args(args_list)
        if not args.command:
            build_parser().print_help(err_stream)
            return EXIT_ERROR
        portal = Portal(
            getattr(args, "portal", None) or os.environ.get("QUOTACTL_PORTAL", ""),
            getattr(args, "token", None) or os.environ.get("QUOTACTL_TOKEN"),
        )
        out = Out(out_stream, use_color(out_stream, getattr(args, "no_color", False)))
        err = Out(err_stream, use_color(err_stream, getattr(args, "no_color", False)))
        return COMMANDS[args.command](portal, args, out, err)
    except PortalError as e:
        _print_error(err_stream, e)
        return EXIT_ERROR
    except (Usage, groups.Usage) as e:
        print(f"quotactl: {e}", file=err_stream)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("quotactl: interrupted", file=err_stream)
        return 130


def _print_error(stream: TextIO, e: PortalError) -> None:
    out = Out(stream, use_color(stream))
    out.line(f"{out.paint('Error', 'error')}: {e.code}: {e.message}")
    for error in e.errors:  # a bad quota file: line and key of each error
        if isinstance(error, dict):
            where = f"line {error.get('line')}" if error.get("line") is not None else "file"
            key = f", {error['key']}" if error.get("key") else ""
            out.line(f"  {where}{key}: {error.get('message')}")


def cmd_export(portal: Portal, args: argparse.Namespace, out: Out, err: Out) -> int:
    text = portal.text(cluster_path(args.cluster, "state.yaml"))
    if args.output:
        Path(args.output).write_text(text)
        err.line(f"Wrote {args.output} (cluster {args.cluster}).")
    else:
        out.stream.write(text)
    return EXIT_OK


def _read_file(name: str | None) -> str:
    if not name:
        raise Usage("name the quota file with -f FILE (or -f - for standard input)")
    if name == "-":
        return sys.stdin.read()
    try:
        return Path(name).read_text()
    except OSError as e:
        raise Usage(f"cannot read {name}: {e.strerror}") from None


def _cluster_of(args: argparse.Namespace, text: str) -> str:
    if args.cluster:
        return str(args.cluster)
    for line in text.splitlines():  # the file's top-level `cluster:` (no YAML parser needed for that)
        if line.startswith("cluster:"):
            value = line.partition(":")[2].split("#")[0].strip().strip("'\"")
            if value:
                return value
    raise Usage("name the cluster with --cluster (the file has no top-level `cluster:`)")


def _make_plan(portal: Portal, args: argparse.Namespace, out: Out) -> dict[str, Any]:
    text = _read_file(args.file)
    cluster = _cluster_of(args, text)
    body: dict[str, Any] = {"document": text, "prune": bool(args.prune)}
    if args.tenant:
        body["tenant"] = args.tenant
    plan = portal.post(cluster_path(cluster, "plans/"), body)
    return _wait_impact(portal, plan, args.wait_impact)


def _pending_impacts(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        c["impact"]
        for c in plan.get("changes", [])
        if c.get("impact") and c["impact"].get("state") not in ("done", "failed")
    ]


def _wait_impact(portal: Portal, plan: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Poll the plan until its impact previews are done (or ``seconds`` pass), with a progress bar on a TTY."""
    if seconds <= 0 or not _pending_impacts(plan):
        return plan
    total = sum(1 for c in plan["changes"] if c.get("impact"))
    bar = Progress("impact previews")
    deadline = time.monotonic() + seconds
    try:
        while True:
            pending = _pending_impacts(plan)
            progress = sum(float(i.get("progress") or 0.0) for i in pending)
            bar.update(total - len(pending) + progress, total, f"{total - len(pending)}/{total} done")
            if not pending or time.monotonic() >= deadline:
                return plan
            time.sleep(POLL_S)
            plan = portal.get(f"/api/plans/{plan['id']}/")
    finally:
        bar.close()


def cmd_plan(portal: Portal, args: argparse.Namespace, out: Out, err: Out) -> int:
    plan = _make_plan(portal, args, out)
    print_plan(out, plan)
    if args.detailed_exitcode and plan.get("changes"):
        return EXIT_CHANGES
    return EXIT_OK


def _confirm(args: argparse.Namespace, err: Out) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise Usage("apply asks before changing anything; pass --yes to apply without a terminal")
    err.stream.write("\nApply these changes? Only 'yes' will be accepted: ")
    err.stream.flush()
    return sys.stdin.readline().strip() == "yes"


def cmd_apply(portal: Portal, args: argparse.Namespace, out: Out, err: Out) -> int:
    if args.plan_id is not None:
        plan = _wait_impact(portal, portal.get(f"/api/plans/{args.plan_id}/"), args.wait_impact)
    else:
        plan = _make_plan(portal, args, out)
    print_plan(out, plan)
    if not plan.get("changes"):
        return EXIT_OK
    if not _confirm(args, err):
        out.line("Apply cancelled.")
        return EXIT_ERROR
    body = {"reason": args.reason} if args.reason else {}
    status, answer = portal.call("POST", f"/api/plans/{plan['id']}/apply/", body)
    out.line("")
    if answer.get("state") == "submitted":
        out.line(
            f"Submitted plan {plan['id']} as request {answer.get('request')}: an admin approves or rejects it as "
            f"a whole ({portal.url}/api/plan-requests/{answer.get('request')}/)."
        )
        return EXIT_OK
    version = answer.get("version")
    out.line(f"Applied plan {plan['id']}: cluster {plan['cluster']} is at desired-state version {version}.")
    if args.wait and version is not None:
        return _wait_pushes(portal, plan["cluster"], int(version), args.wait_timeout, out)
    return EXIT_OK


def _wait_pushes(portal: Portal, cluster: str, version: int, seconds: float, out: Out) -> int:
    """Poll the pushes of ``version`` until every target holds it, with a progress bar on a TTY."""
    bar = Progress("pushing to brokers")
    deadline = time.monotonic() + seconds
    rows: list[dict[str, Any]] = []
    try:
        while True:
            try:
                query = urllib.parse.urlencode({"cluster": cluster, "version": version})
                rows = portal.pages("GET", f"/api/pushes/?{query}")
            except PortalError as e:
                if e.code == "PERMISSION_DENIED":
                    out.line("Not waiting for the pushes: only admins and auditors read push status.")
                    return EXIT_OK
                raise
            if not rows:
                bar.close()
                out.line(f"Nothing to wait for: no broker or cluster target takes version {version} of {cluster}.")
                return EXIT_OK
            applied = sum(1 for r in rows if r.get("state") == "applied")
            failed = [r for r in rows if r.get("state") == "failed"]
            bar.update(applied, max(1, len(rows)), f"{applied}/{len(rows)} targets")
            if failed:
                bar.close()
                for r in failed:
                    out.line(f"Push of version {version} failed: {r.get('error_code')}: {r.get('error')}")
                return EXIT_ERROR
            if rows and applied == len(rows):
                bar.close()
                out.line(f"Every target answers version {version}.")
                return EXIT_OK
            if time.monotonic() >= deadline:
                bar.close()
                out.line(
                    f"After {seconds:g} s, {applied} of {len(rows)} targets answer version {version}; the portal "
                    "keeps retrying (GET /api/pushes/)."
                )
                return EXIT_ERROR
            time.sleep(POLL_S)
    finally:
        bar.close()


COMMANDS = {"export": cmd_export, "plan": cmd_plan, "apply": cmd_apply, "groups": groups.run, "exempt": groups.run}
