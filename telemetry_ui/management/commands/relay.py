"""``python manage.py relay``: the live-monitoring relay (``telemetry_ui/live/relay.py``), until SIGTERM or Ctrl-C."""

from __future__ import annotations

import asyncio
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from telemetry_ui.live.relay import serve


class Command(BaseCommand):
    help = "Tail every cluster's monitoring firehose and fan it out to the WebSocket consumers' Channels groups."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--redis-url", default=None, help="Redis of the firehoses (default: QUOTAS_REDIS_URL)")
        parser.add_argument(
            "--clusters-every", type=float, default=30.0, help="re-read the cluster list this often, in s (30)"
        )
        parser.add_argument("--block-ms", type=int, default=1000, help="longest wait of one XREAD, in ms (1000)")
        parser.add_argument(
            "--coalesce-ms", type=int, default=150,
            help="wait at most this long for other brokers' ticks due right after one, in ms (150; 0 = off)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        layer = get_channel_layer()
        if layer is None:
            raise CommandError("No channel layer: set CHANNEL_LAYERS (portal/settings.py) to relay anything.")
        url = options["redis_url"] or settings.QUOTAS_REDIS_URL
        asyncio.run(serve(url, layer, clusters_every_s=options["clusters_every"], block_ms=options["block_ms"],
                          coalesce_ms=options["coalesce_ms"]))
