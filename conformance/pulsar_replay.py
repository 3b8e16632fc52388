"""Replay PIP-442 conformance cases (``conformance/pulsar_vectors.json``) on the memory limiter, in virtual time.

Why virtual time: the cases fix *when* timeouts and Pulsar's one-shot queue pass happen (``t_ms``), which only a
clock we advance ourselves reproduces exactly. Each case runs on a fresh instance; before a step every timer due
at or before its ``t_ms`` fires, and the step's output is read after the timers the step itself made due have
fired too (the schema's "quiescence"). The replay command restricts each output to the keys of the step's
``expect``; :func:`check_expect` applies the expectation forms.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from memory_limiter.limiter import (
    AsyncDualMemoryLimiter,
    AsyncSemaphore,
    IllegalArgumentException,
    LimitType,
    Permit,
    SemaphoreConfig,
    VirtualClock,
)

Out = dict[str, Any]
KINDS = ("async_semaphore", "async_dual_memory_limiter")


class _Unsupported(Exception):
    """An op or argument this replay cannot express: the whole case is reported unsupported, never guessed."""


class _ForeignPermit:
    """A permit object the limiter did not produce (Pulsar's tests use an anonymous AsyncDualMemoryLimiterPermit)."""

    def __init__(self, permits: int, limit_type: str | None) -> None:
        self.permits = permits
        self.limit_type = limit_type


def _config(c: dict[str, Any]) -> SemaphoreConfig:
    return SemaphoreConfig(int(c.get("max_permits", 0)), int(c.get("max_queue_size", 0)), c.get("timeout_ms", 0))


class _CaseRun:
    def __init__(self, kind: str, config: dict[str, Any], clock: VirtualClock) -> None:
        self.clock = clock
        self.dual: AsyncDualMemoryLimiter | None = None
        self.sem: AsyncSemaphore | None = None
        if kind == "async_dual_memory_limiter":
            self.dual = AsyncDualMemoryLimiter(
                _config(config.get("heap") or {}), _config(config.get("direct") or {}), clock=clock
            )
        else:
            c = _config(config)
            self.sem = AsyncSemaphore(c.max_permits, c.max_queue_size, c.timeout_ms, clock=clock)
        self.handles: dict[str, asyncio.Future[Permit]] = {}
        self.flags: dict[str, bool] = {}

    # ------------------------------------------------------------ plumbing

    def step(self, s: dict[str, Any]) -> Out:
        if s.get("t_ms") is not None:
            self.clock.advance_to(float(s["t_ms"]))
        op = s.get("op")
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            raise _Unsupported(f"op {op!r}")
        try:
            show: Callable[[], Out] = handler(s.get("args") or {})
        except IllegalArgumentException as e:
            out: Out = {"throws": e.java_class, "message": e.message}
            self.clock.advance_to(self.clock.now_ms())
            return out
        self.clock.advance_to(self.clock.now_ms())
        return show()

    def close(self) -> None:
        for fut in self.handles.values():  # mark failures as seen: no "exception was never retrieved" noise
            if fut.done() and not fut.cancelled():
                fut.exception()

    def pool(self, args: dict[str, Any], fut: asyncio.Future[Permit] | None = None) -> AsyncSemaphore:
        if self.sem is not None:
            return self.sem
        assert self.dual is not None
        lt = args.get("limit_type")
        if lt is None and fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None:
            lt = fut.result().limit_type
        return self.dual.get_limiter(lt or LimitType.HEAP_MEMORY)

    def limiter(self) -> AsyncSemaphore | AsyncDualMemoryLimiter:
        return self.sem if self.sem is not None else self.dual  # type: ignore[return-value]

    def flag(self, args: dict[str, Any]) -> Callable[[], bool] | None:
        name = args.get("cancel_flag")
        if name is None:
            return None
        self.flags.setdefault(name, False)
        return lambda: self.flags[name]

    def future(self, handle: Any) -> asyncio.Future[Permit]:
        fut = self.handles.get(handle)
        if fut is None:
            raise _Unsupported(f"unknown handle {handle!r}")
        return fut

    def permit(self, handle: Any) -> Permit:
        fut = self.future(handle)
        if not fut.done() or fut.cancelled() or fut.exception() is not None:
            raise _Unsupported(f"handle {handle!r} holds no permit (its acquisition was not granted)")
        return fut.result()

    @staticmethod
    def stats(pool: AsyncSemaphore) -> Out:
        return {
            "available_permits": pool.available_permits,
            "acquired_permits": pool.acquired_permits,
            "queue_size": pool.queue_size,
        }

    def describe(self, fut: asyncio.Future[Permit], pool: AsyncSemaphore) -> Out:
        out: Out
        if not fut.done():
            out = {"state": "pending"}
        elif fut.cancelled():
            out = {"state": "cancelled"}
        elif (exc := fut.exception()) is not None:
            out = {"state": "failed", "error": getattr(exc, "java_class", type(exc).__name__), "message": str(exc)}
        else:
            permit = fut.result()
            out = {"state": "granted", "permits": permit.permits}
            if self.dual is not None:
                out["limit_type"] = str(permit.limit_type)
        out.update(self.stats(pool))
        return out

    # ------------------------------------------------------------ ops (each returns how to read its output)

    def op_acquire(self, a: dict[str, Any]) -> Callable[[], Out]:
        permits = int(a["permits"])
        if self.dual is not None:
            lt = a.get("limit_type", LimitType.HEAP_MEMORY)
            fut = self.dual.acquire(permits, lt, self.flag(a))
        else:
            assert self.sem is not None
            fut = self.sem.acquire(permits, self.flag(a))
        self.handles[a["handle"]] = fut
        pool = self.pool(a)
        return lambda: self.describe(fut, pool)

    def op_update(self, a: dict[str, Any]) -> Callable[[], Out]:
        permit = self.permit(a["handle"])
        fut = self.limiter().update(permit, int(a["new_permits"]), self.flag(a))
        if a.get("new_handle") is not None:
            self.handles[a["new_handle"]] = fut
        pool = self.pool({"limit_type": permit.limit_type})
        return lambda: self.describe(fut, pool)

    def op_release(self, a: dict[str, Any]) -> Callable[[], Out]:
        permit = self.permit(a["handle"])
        self.limiter().release(permit)
        pool = self.pool({"limit_type": permit.limit_type})
        return lambda: self.stats(pool)

    def op_set_flag(self, a: dict[str, Any]) -> Callable[[], Out]:
        self.flags[a["flag"]] = bool(a.get("value", True))
        return dict

    def op_cancel_future(self, a: dict[str, Any]) -> Callable[[], Out]:
        fut = self.future(a["handle"])
        fut.cancel()
        pool = self.pool(a, fut)
        return lambda: self.describe(fut, pool)

    def op_close(self, a: dict[str, Any]) -> Callable[[], Out]:
        self.limiter().close()
        pool = self.pool(a)
        return lambda: self.stats(pool)

    def op_observe(self, a: dict[str, Any]) -> Callable[[], Out]:
        fut = self.future(a["handle"])
        pool = self.pool(a, fut)
        return lambda: self.describe(fut, pool)

    def op_stats(self, a: dict[str, Any]) -> Callable[[], Out]:
        pool = self.pool(a)
        return lambda: self.stats(pool)

    def op_update_foreign_permit(self, a: dict[str, Any]) -> Callable[[], Out]:
        foreign = _ForeignPermit(int(a.get("permits", 0)), a.get("limit_type"))
        fut = self.limiter().update(foreign, int(a["new_permits"]), self.flag(a))  # type: ignore[arg-type]
        if a.get("new_handle") is not None:
            self.handles[a["new_handle"]] = fut
        pool = self.pool(a)
        return lambda: self.describe(fut, pool)

    def op_release_foreign_permit(self, a: dict[str, Any]) -> Callable[[], Out]:
        foreign = _ForeignPermit(int(a.get("permits", 0)), a.get("limit_type"))
        self.limiter().release(foreign)  # type: ignore[arg-type]
        pool = self.pool(a)
        return lambda: self.stats(pool)


def replay_pulsar_case(case: dict[str, Any], *, full: bool = False) -> list[Out] | Out:
    """One output per step of a fresh instance, or ``{"unsupported": why}`` for the whole case.

    A step without ``expect`` gives ``{}`` (nothing is asserted there) unless ``full`` asks for every output.
    """
    kind = case.get("kind")
    if kind not in KINDS:
        return {"unsupported": f"kind {kind!r} is not a PIP-442 kind ({', '.join(KINDS)})"}
    clock = VirtualClock()
    run: _CaseRun | None = None
    try:
        run = _CaseRun(kind, case.get("config") or {}, clock)
        outs: list[Out] = []
        for s in case.get("steps", []):
            out = run.step(s)
            outs.append(out if full or "expect" in s else {})
        return outs
    except _Unsupported as e:
        return {"unsupported": str(e)}
    finally:
        if run is not None:
            run.close()
        clock.close()


# ---------------------------------------------------------------- expectations

_FORMS = {"approx", "tol", "gt", "ge", "lt", "le", "between", "ne"}


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _equal(want: Any, got: Any) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return type(want) is type(got) and want == got
    if _is_number(want) and _is_number(got):
        if isinstance(want, int) and isinstance(got, int):
            return want == got  # exact for longs such as Long.MAX_VALUE
        return float(want) == float(got) or (math.isnan(float(want)) and math.isnan(float(got)))
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(_equal(want[k], got[k]) for k in want)
    if isinstance(want, list | tuple) and isinstance(got, list | tuple):
        return len(want) == len(got) and all(_equal(w, g) for w, g in zip(want, got, strict=True))
    return bool(want == got)


def _check_form(want: dict[str, Any], got: Any) -> str | None:
    if "ne" in want and _equal(want["ne"], got):
        return f"expected != {want['ne']!r}, got {got!r}"
    numeric = _FORMS - {"ne"}
    if not numeric & want.keys():
        return None
    if not _is_number(got):
        return f"expected a number ({want}), got {got!r}"
    if "approx" in want and not abs(got - want["approx"]) <= want.get("tol", 0):
        return f"expected {want['approx']!r} +- {want.get('tol', 0)!r}, got {got!r}"
    for key, holds in (
        ("gt", lambda b: got > b),
        ("ge", lambda b: got >= b),
        ("lt", lambda b: got < b),
        ("le", lambda b: got <= b),
    ):
        if key in want and not holds(want[key]):
            return f"expected {key} {want[key]!r}, got {got!r}"
    if "between" in want:
        lo, hi = want["between"]
        if not lo <= got <= hi:
            return f"expected between {lo!r} and {hi!r}, got {got!r}"
    return None


def check_expect(expect: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """Mismatches of ``got`` against a step's ``expect`` (empty when it holds), one description per field.

    Forms: a scalar (exact; numbers as doubles, integers exactly), ``{approx, tol}``, ``{gt}|{ge}|{lt}|{le}``,
    ``{between: [a, b]}`` (inclusive), ``{ne}``; ``message`` is the exact message, ``message_contains`` a part of it.
    """
    problems: list[str] = []
    for key, want in expect.items():
        if key == "message_contains":
            msg = got.get("message")
            if not isinstance(msg, str) or str(want) not in msg:
                problems.append(f"message_contains: expected a message containing {want!r}, got {msg!r}")
            continue
        if key not in got:
            problems.append(f"{key}: expected {want!r}, got nothing (output {got!r})")
            continue
        have = got[key]
        if isinstance(want, dict) and want and want.keys() <= _FORMS:
            problem = _check_form(want, have)
        else:
            problem = None if _equal(want, have) else f"expected {want!r}, got {have!r}"
        if problem:
            problems.append(f"{key}: {problem}")
    return problems
