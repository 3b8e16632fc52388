"""The simulated people of ``benchmarks/load_bench.py``, in one asyncio loop: members browsing pages and holding
live sockets, tenants submitting quota requests, admins approving them, planners running ``quotactl plan``.

No Django here: the people reach the portal as browsers and scripts do, over HTTP/1.1 keep-alive connections of
their own (a small client on asyncio streams: the venv has no httpx or aiohttp) and the ``websockets`` client.
Every action is timed from its first byte sent to its last byte read, by kind (``KINDS``); anything but the
expected answer is an error of that kind.
"""

from __future__ import annotations

import asyncio
import io
import json
import random
import time
from collections import Counter, defaultdict, deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.engine_bench import percentile

#: What is timed, in the order the report shows it. ``health`` is the baseline: ``GET /healthz`` of each replica
#: every ``PROBE_S`` by a probe that is not one of the people.
KINDS = ("health", "monitor", "entities", "requests", "preview", "ws", "submit", "approvals", "approve", "plan")
PROBE_S = 0.25
TIMEOUT_S = 30.0  # an answer slower than this is an error (a hung request), not a sample
#: Share of the people per role (the rest are members), and each role's pause between two actions, as a multiple
#: of ``think_s``: a tenant fills a form, a planner edits a file between two plans.
ROLES = {"planner": 0.05, "admin": 0.10, "tenant": 0.15}
PAUSE = {"member": 1.0, "tenant": 2.0, "admin": 1.0, "planner": 5.0}
MEMBER_PAGES = {"monitor": 0.3, "entities": 0.25, "requests": 0.25, "preview": 0.2}
PRINCIPALS = 200  # per tenant: a principal has at most one request waiting at a time (a second would go stale)


class HttpError(Exception):
    """An answer that is not the one expected."""


class Http:
    """One keep-alive HTTP/1.1 connection to a replica, as a browser tab holds one."""

    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self.port, self.headers = port, headers
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def call(self, method: str, path: str, body: Any = None, expect: int = 200) -> bytes:
        data = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Length: {len(data)}\r\n"
        if body is not None:
            head += "Content-Type: application/json\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in self.headers.items()) + "\r\n"
        for attempt in (0, 1):
            reused = self.writer is not None
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            try:
                assert self.writer is not None
                self.writer.write(head.encode() + data)
                await self.writer.drain()
                status, answer = await asyncio.wait_for(self._answer(), TIMEOUT_S)
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if reused and attempt == 0:
                    continue  # the server closed an idle keep-alive connection: a new one, as browsers do
                raise
            except BaseException:
                self.close()
                raise
            if status != expect:
                raise HttpError(f"{method} {path}: {status} {answer[:200]!r}")
            return answer
        raise AssertionError("unreachable")

    async def _answer(self) -> tuple[int, bytes]:
        assert self.reader is not None
        status = int((await self.reader.readuntil(b"\r\n")).split()[1])
        headers: dict[str, str] = {}
        while (line := await self.reader.readuntil(b"\r\n")) != b"\r\n":
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            body = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16):
                chunks.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
            while await self.reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            body = b"".join(chunks)
        else:
            body = await self.reader.read()
            self.close()
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


@dataclass
class World:
    """What the people need of the portal set up by ``load_bench``: replicas, logins, files."""

    ports: list[int]
    cluster: str
    members: list[str]  # session cookies of tenant members, one per tenant
    previews: list[list[int]]  # impact previews each of those members may see
    tenants: list[tuple[str, str]]  # (API token, principal prefix) of a member of each tenant
    admin_token: str
    admin_cookie: str
    plan_token: str  # a personal access token (quotactl's Bearer)
    plan_files: list[Path]  # quota files, each with a change against the cluster's state


@dataclass
class Recorder:
    """Latencies of the actions started inside the measured window, actions and errors of the whole step."""

    window: tuple[float, float] = (float("inf"), float("inf"))
    samples: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    actions: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    frames: int = 0  # live frames the sockets read

    async def timed(self, kind: str, action: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``action``, timing it as ``kind``; an exception is an error of that kind (None returned)."""
        started = time.perf_counter()
        try:
            result = await action()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.error(kind, f"{type(e).__name__}: {e}")
            return None
        self.actions[kind] += 1
        if self.window[0] <= started < self.window[1]:
            self.samples[kind].append((time.perf_counter() - started) * 1000)
        return result

    def error(self, kind: str, what: str) -> None:
        self.errors[kind] += 1
        if len(self.examples) < 10:
            self.examples.append(f"{kind}: {what[:300]}")

    def figures(self) -> dict[str, dict[str, Any]]:
        out = {}
        for kind in KINDS:
            values = sorted(self.samples.get(kind, []))
            out[kind] = {"n": len(values), "actions": self.actions[kind], "errors": self.errors[kind],
                         "p50_ms": round(percentile(values, 50), 1) if values else None,
                         "p99_ms": round(percentile(values, 99), 1) if values else None}
        return out


class LiveSocket:
    """A member's ``/ws/monitor/`` socket subscribed to the cluster's live samples, read until closed."""

    def __init__(self, port: int, cookie: str, cluster: str, rec: Recorder) -> None:
        self.port, self.cookie, self.cluster, self.rec = port, cookie, cluster, rec
        self.ws: Any = None
        self.reader: asyncio.Task[None] | None = None

    async def open(self) -> None:
        from websockets.asyncio.client import connect

        self.ws = await connect(f"ws://127.0.0.1:{self.port}/ws/monitor/", origin=f"http://127.0.0.1:{self.port}",
                                additional_headers={"Cookie": self.cookie}, open_timeout=TIMEOUT_S, proxy=None)
        await self.ws.send(json.dumps({"action": "subscribe_cluster", "cluster": self.cluster}))
        while True:
            frame = json.loads(await asyncio.wait_for(self.ws.recv(), TIMEOUT_S))
            if frame.get("type") == "subscribed":
                break
            if frame.get("type") == "error":
                raise HttpError(f"socket: {frame}")
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for _ in self.ws:
                self.rec.frames += 1
        except ConnectionClosed as e:
            self.rec.error("ws", f"dropped: {e}")
        else:
            if self.reader is not None:  # not closed by us
                self.rec.error("ws", "closed by the server")

    async def close(self) -> None:
        reader, self.reader = self.reader, None
        if reader is not None:
            reader.cancel()
        if self.ws is not None:
            await self.ws.close()


class Crowd:
    """``users`` people over the replicas (person i on replica i % n: sticky, as a load balancer keeps a session),
    the health probes, and what the tenants and admins share: the requests waiting for approval, the free
    principals."""

    def __init__(self, world: World, users: int, think_s: float, seed: int) -> None:
        self.world, self.users, self.think_s = world, users, think_s
        self.rng = random.Random(seed)
        self.rec = Recorder()
        self.stop = asyncio.Event()
        self.waiting: asyncio.Queue[tuple[int, str, str]] = asyncio.Queue()
        self.free = {prefix: deque(f"{prefix}load-{k}" for k in range(PRINCIPALS)) for _, prefix in world.tenants}

    def roles(self) -> list[str]:
        """Every role at least once (from 4 people), then by ``ROLES``; members make up the rest."""
        special = [role for role, share in ROLES.items() for _ in range(max(1, round(share * self.users)))]
        return special[: self.users] + ["member"] * max(0, self.users - len(special))

    async def pause(self, role: str) -> None:
        """A person's pause between two actions: ``think_s`` (times the role's multiple), +-50 %."""
        try:
            await asyncio.wait_for(self.stop.wait(), self.think_s * PAUSE[role] * self.rng.uniform(0.5, 1.5))
        except TimeoutError:
            pass

    async def person(self, i: int, role: str) -> None:
        port = self.world.ports[i % len(self.world.ports)]
        await asyncio.sleep(self.rng.uniform(0, self.think_s))  # people arrive spread over a pause, not at once
        await getattr(self, role)(i, port)

    async def member(self, i: int, port: int) -> None:
        w, rec = self.world, self.rec
        cookie = w.members[i % len(w.members)]
        previews = w.previews[i % len(w.members)]
        http = Http(port, {"Cookie": cookie})
        socket: LiveSocket | None = None
        paths = {"monitor": "/monitor/", "entities": "/entities/", "requests": "/requests/"}
        try:
            while not self.stop.is_set():
                kind = self.rng.choices(list(MEMBER_PAGES), list(MEMBER_PAGES.values()))[0]
                path = f"/previews/{self.rng.choice(previews)}/" if kind == "preview" else paths[kind]
                await rec.timed(kind, partial(http.call, "GET", path))
                if kind == "monitor":  # the page opens its live socket; the one of the page before is closed
                    if socket is not None:
                        await socket.close()
                    socket = LiveSocket(port, cookie, w.cluster, rec)
                    await rec.timed("ws", socket.open)
                await self.pause("member")
        finally:
            if socket is not None:
                await socket.close()
            http.close()

    async def tenant(self, i: int, port: int) -> None:
        token, prefix = self.world.tenants[i % len(self.world.tenants)]
        http = Http(port, {"Authorization": f"Token {token}"})
        try:
            while not self.stop.is_set():
                if self.free[prefix]:
                    principal = self.free[prefix].popleft()
                    body = {"cluster": self.world.cluster, "user": principal, "key": "producer_byte_rate",
                            "value": float(1024 * self.rng.randint(1, 1000))}
                    made = await self.rec.timed("submit", partial(http.call, "POST", "/api/requests/", body, 201))
                    if made is None:
                        self.free[prefix].append(principal)
                    else:
                        self.waiting.put_nowait((json.loads(made)["id"], prefix, principal))
                await self.pause("tenant")
        finally:
            http.close()

    async def admin(self, i: int, port: int) -> None:
        w = self.world
        api = Http(port, {"Authorization": f"Token {w.admin_token}"})
        pages = Http(port, {"Cookie": w.admin_cookie})
        try:
            while not self.stop.is_set():  # the approval queue's page, then the oldest request waiting approved
                await self.rec.timed("approvals", partial(pages.call, "GET", "/approvals/"))
                if not self.waiting.empty():
                    await self.approve(api, "approve")
                await self.pause("admin")
        finally:
            api.close()
            pages.close()

    async def approve(self, api: Http, kind: str) -> None:
        pk, prefix, principal = self.waiting.get_nowait()
        await self.rec.timed(kind, partial(api.call, "POST", f"/api/requests/{pk}/approve/", {"comment": "load"}))
        self.free[prefix].append(principal)

    async def planner(self, i: int, port: int) -> None:
        w = self.world
        while not self.stop.is_set():
            path = w.plan_files[self.rng.randrange(len(w.plan_files))]
            await self.rec.timed("plan", partial(asyncio.to_thread, quotactl_plan, f"http://127.0.0.1:{port}",
                                                 w.plan_token, w.cluster, path))
            await self.pause("planner")

    async def probe(self, port: int) -> None:
        http = Http(port, {})
        try:
            while not self.stop.is_set():
                await self.rec.timed("health", partial(http.call, "GET", "/healthz"))
                try:
                    await asyncio.wait_for(self.stop.wait(), PROBE_S)
                except TimeoutError:
                    pass
        finally:
            http.close()

    async def run(self, warmup_s: float, seconds: float) -> Recorder:
        """Everyone acts for ``warmup_s`` + ``seconds``; latencies count in the last ``seconds``. Then each finishes
        the action under way, and the requests still waiting are approved (not timed) for the next step."""
        roles = self.roles()
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(roles.count("planner") + 2))
        tasks = [asyncio.create_task(self.person(i, role)) for i, role in enumerate(roles)]
        tasks += [asyncio.create_task(self.probe(port)) for port in self.world.ports]
        await asyncio.sleep(warmup_s)
        now = time.perf_counter()
        self.rec.window = (now, now + seconds)
        await asyncio.sleep(seconds)
        self.stop.set()
        done, hung = await asyncio.wait(tasks, timeout=TIMEOUT_S + 10)
        for task in hung:
            task.cancel()
            self.rec.error("hung", "a person did not finish its action")
        for task in done:
            if task.exception() is not None:
                self.rec.error("crashed", repr(task.exception()))
        api = Http(self.world.ports[0], {"Authorization": f"Token {self.world.admin_token}"})
        while not self.waiting.empty():
            await self.approve(api, "approve_after")
        api.close()
        return self.rec


def quotactl_plan(portal: str, token: str, cluster: str, path: Path) -> None:
    """``quotactl plan --cluster C -f FILE`` in this process (its ``main``, over HTTP); fails unless it exits 0."""
    from quotactl.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(["--portal", portal, "--token", token, "--no-color", "plan", "--cluster", cluster, "-f", str(path)],
                stdout=out, stderr=err)
    if code != 0:
        raise HttpError(f"quotactl plan exited {code}: {err.getvalue()[-300:]}")
