"""``python manage.py loadgen``: demo traffic through the quota engine of the portal's engine clusters.

See ``traffic/loadgen.py`` for what the clients do. It runs until SIGTERM / SIGINT (or ``--duration`` seconds),
then releases the connections it holds. Run ``python manage.py demo_data`` first: the clients are its principals.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, connections

from quotas.targets import targets_from_db
from traffic.loadgen import LoadGenerator


class Command(BaseCommand):
    help = "Drive the demo clients' traffic through every broker's quota engine (until SIGTERM/SIGINT)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--cluster", action="extend", nargs="+", default=[], metavar="NAME",
                            help="Only these clusters (default: every engine cluster).")
        parser.add_argument("--duration", type=float, default=None, metavar="S", help="Stop after S seconds.")
        parser.add_argument("--tick-ms", type=int, default=100, help="Milliseconds between two rounds of requests.")
        parser.add_argument("--seed", type=int, default=7, help="Seed of the clients' randomness.")
        parser.add_argument("--status-every", type=float, default=10.0, metavar="S",
                            help="Print what the load did every S seconds.")

    def handle(self, *args: Any, **options: Any) -> None:
        names = options["cluster"]
        targets = targets_from_db(names or None)
        missing = sorted(set(names) - set(targets))
        if missing:
            raise CommandError(f"No engine cluster with brokers named {', '.join(missing)}.")
        if not targets:
            raise CommandError("No engine cluster with brokers: run `python manage.py demo_data` first.")
        if not connection.in_atomic_block:  # (a test's transaction) the database is not needed from here on
            connections.close_all()

        def out(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        # the samples go to the portal's Redis, where the relay and the charts read them, wherever the engine is
        gen = LoadGenerator(
            targets, tick_ms=options["tick_ms"], seed=options["seed"], out=out, status_every_s=options["status_every"],
            monitor_url=settings.QUOTAS_REDIS_URL,
        )

        def stop(signum: int, _frame: Any) -> None:
            out(f"loadgen: {signal.Signals(signum).name}, stopping")
            gen.stop()

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            brokers = ", ".join(f"{c} ({len(b)} brokers)" for c, b in targets.items())
            out(f"loadgen: driving {brokers}; tick {options['tick_ms']} ms, seed {options['seed']}")
            gen.run(options["duration"])
        finally:
            gen.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        out("loadgen: stopped, connections released")
        sys.stdout.flush()
