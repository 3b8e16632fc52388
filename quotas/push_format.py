"""The format of the push messages between the portal and its workers, and the newest one every live worker reads.

A message carries its format in a header (``quotas_push_format``); a worker of an older version ignores the header.
The portal sends the newest format every live push worker reads, as the last survey found it (``survey``: a
broadcast that each worker answers with the newest format it reads; a worker of a version before formats answers
with an error, and its registered tasks say which of the first two formats it reads). Without a survey (none yet,
its key expired) the portal sends the oldest format, which every version reads. A worker that receives a message in
a format newer than its own sends it back to the queue, for a worker that reads it (``defer``).
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery import Celery

log = logging.getLogger(__name__)

#: One ``quotas.tasks.push_target(cluster_id, broker_pk)`` per target: every version of the worker reads it.
FORMAT_TARGET = 1
#: ``quotas.tasks.push_group(cluster_id, broker_pks)``: one message for the targets a commit left behind.
FORMAT_GROUP = 2
#: The message says its format (``HEADER``); a worker defers a format newer than its own; workers answer the survey.
FORMAT_VERSIONED = 3
#: The newest format this code writes and reads.
PUSH_FORMAT = FORMAT_VERSIONED

HEADER = "quotas_push_format"
DEFERRED_HEADER = "quotas_push_deferred"  # how many times workers sent the message back
FLEET_KEY = "portal:push-format"  # the newest format every live push worker reads (the last survey's answer)
COMMAND = "quotas_push_format"  # the remote-control command workers answer the survey with
PUSH_QUEUE = "celery"  # the queue of the push tasks (CELERY_TASK_ROUTES sends them nowhere else)
DEFER_S = 5.0
#: A message no worker could read for this many rounds (DEFER_S apart) is dropped: its target's pending flag is left
#: set, grows stale, and reconcile sends the push again in a format the workers read.
MAX_DEFERS = 60


def headers(fmt: int, deferred: int = 0) -> dict[str, int]:
    """The message headers of a push in format ``fmt``."""
    return {HEADER: fmt, DEFERRED_HEADER: deferred} if deferred else {HEADER: fmt}


def message_format(request: Any) -> int:
    """The format of the message a task is running (its ``request``): a message without the header was sent by a
    portal from before formats, in one of the first two."""
    try:
        return int(getattr(request, HEADER, None) or FORMAT_GROUP)
    except (TypeError, ValueError):
        return PUSH_FORMAT + 1  # not a format this code knows: not one it can read


def parse_fleet(raw: bytes | str | None) -> int:
    """The format to send, from the survey's key: the oldest one when there is no (valid) answer."""
    try:
        return max(FORMAT_TARGET, min(PUSH_FORMAT, int(raw))) if raw is not None else FORMAT_TARGET
    except ValueError:
        return FORMAT_TARGET


def sendable(client: redis.Redis) -> int:
    """The newest format every live push worker reads, at most this code's."""
    return parse_fleet(client.get(FLEET_KEY))


def worker_answer(queues: list[str]) -> dict[str, Any]:
    """What a worker of this version answers the survey: its newest format and the queues it consumes."""
    return {"format": PUSH_FORMAT, "queues": queues}


def survey(app: Celery, client: redis.Redis, *, timeout: float = 1.0, ttl_s: float = 180.0) -> int | None:
    """Ask every live worker which formats it reads and store the newest one all push workers read (``FLEET_KEY``,
    expiring after ``ttl_s``: a survey that stops running falls back to the oldest format). Returns it, or None when
    no worker answered (the key is left as it is)."""
    replies: dict[str, Any] = {}
    for reply in app.control.broadcast(COMMAND, reply=True, timeout=timeout) or []:
        replies.update(reply)
    if not replies:
        return None
    formats: list[int] = []
    older = []
    for host, answer in replies.items():
        if isinstance(answer, dict) and "format" in answer:
            if PUSH_QUEUE in answer.get("queues", [PUSH_QUEUE]):
                formats.append(int(answer["format"]))
        else:  # "no such command": a version from before formats
            older.append(host)
    if older:
        formats.extend(_older_formats(app, older, timeout))
    fleet = min(formats, default=PUSH_FORMAT)
    client.set(FLEET_KEY, fleet, ex=max(1, int(ttl_s)))
    if older:
        log.info("Workers %s run a version from before push formats: sending format %s", ", ".join(older), fleet)
    return fleet


def _older_formats(app: Celery, hosts: list[str], timeout: float) -> list[int]:
    """The formats of workers from before formats, by the push tasks they have: those that consume another queue
    than the pushes' count too (their queues are one more question; they are upgraded with the others)."""
    registered = app.control.inspect(destination=hosts, timeout=timeout).registered() or {}
    def names(host: str) -> set[str]:  # "name [rate_limit=...]" per task
        return {str(t).split(" ")[0] for t in registered.get(host, [])}

    return [FORMAT_GROUP if "quotas.tasks.push_group" in names(h) else FORMAT_TARGET for h in hosts]
