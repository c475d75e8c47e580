"""The session executor: run one agent task (a :class:`SessionPlan`) against a transport, on a clock.

Each model step sends the whole conversation so far (system prefix, user request, every earlier output
and tool result) as chat messages, as a real agent resends it. Tool, retrieval and code steps wait their
planned duration on the clock (virtual or wall) or run for real (a local command, an HTTP URL). Failed
attempts follow the plan's policy: retry with backoff, a correction turn after a failed action, give up
after K failures, per-step timeouts and a session deadline. Every request attempt is journaled through
``on_record`` as it finishes; the session's own record is returned (and passed to ``on_session``).

A server fault is never an exception here: it is a failed attempt, then a failed step, then (retries
spent) a failed session.

Live mode (``plan.live``): each model step sends the plan's OpenAI ``tools``; while the answer holds
``tool_calls``, each call runs as a tool action (simulated or real, retried by the policy), the assistant
message with its calls and one ``tool`` message per result join the conversation, and the model is asked
again, up to ``max_turns`` requests per step. Live tool retries are silent (no correction turn: a tool
call must be answered by its result before the model speaks again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from servelab.clock import NS_PER_S, Clock
from servelab.errors import ConfigError
from servelab.records.schema import (
    CANCELLED,
    OK,
    TIMEOUT,
    RequestRecord,
    SessionRecord,
    started_session,
)
from servelab.transport.base import ModelRequest, Transport, ended_record
from servelab.workload.agent import Action, ModelTurn, SessionPlan, TextSource, Think

S_OK, S_FAILED, S_TIMED_OUT = "ok", "failed", "timed_out"
_TIME_FIELD = {"tool": "tool_ns", "retrieval": "retrieval_ns", "code": "code_ns"}


class RequestIds:
    """A shared counter of request ids (one per run shard; every attempt takes the next).

    Shard ``w`` of ``W`` counts ``w, w + W, w + 2W...``, so ids stay unique across the shards of a run."""

    __slots__ = ("_n", "_step")

    def __init__(self, start: int = 0, step: int = 1) -> None:
        self._n = start
        self._step = step

    def next(self) -> int:
        n = self._n
        self._n = n + self._step
        return n


class _Stop(Exception):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


async def run_session(
    plan: SessionPlan,
    transport: Transport,
    clock: Clock,
    ids: RequestIds,
    *,
    on_record: Callable[[RequestRecord], None],
    texts: TextSource,
    on_session: Callable[[SessionRecord], None] | None = None,
    intended_ns: int | None = None,
    warmup: bool = False,
    api: str = "chat",
    stream: bool = True,
    extra_body: dict[str, Any] | None = None,
) -> SessionRecord:
    """Run ``plan`` to its end and return its :class:`SessionRecord` (status ok / failed / timed_out).

    On cancellation the session record (status ``cancelled``) and a ``cancelled`` record of the request in
    flight are still emitted, then the cancellation propagates.
    """
    if clock.virtual and (any(isinstance(s, Action) and (s.command or s.url) for s in plan.steps)
                          or (plan.live is not None and plan.live.real)):
        raise ConfigError(
            f"session '{plan.profile}' runs a real command or url, which cannot be timed on virtual time",
            hint="against the simulator give tool steps a duration_s instead of command/url",
        )
    run = _Session(plan, transport, clock, ids, on_record, texts, intended_ns, warmup,
                   api, stream, extra_body or {})
    try:
        return await run.run()
    finally:
        if on_session is not None:
            on_session(run.rec)


class _Session:
    def __init__(self, plan: SessionPlan, transport: Transport, clock: Clock, ids: RequestIds,
                 on_record: Callable[[RequestRecord], None], texts: TextSource, intended_ns: int | None,
                 warmup: bool, api: str, stream: bool, extra_body: dict[str, Any]) -> None:
        self.plan, self.tr, self.clock, self.ids, self.emit, self.texts = (
            plan,
            transport,
            clock,
            ids,
            on_record,
            texts,
        )
        self.api, self.stream, self.extra_body = api, stream, extra_body
        if plan.live is not None:
            self.extra_body = {**extra_body, "tools": plan.live.tools}
        self.warmup = warmup
        now = clock.now()
        self.intended_ns = now if intended_ns is None else intended_ns
        self.rec = started_session(plan.session_id, plan.profile, now, warmup)
        d = plan.policy.deadline_s
        self.deadline_ns = None if d is None else self.intended_ns + int(d * NS_PER_S)
        self.messages: list[dict[str, Any]] = []
        self.pending: list[str] = []  # user-side content (user text, tool results) not yet sent
        self.ctx_tokens = 0
        self.failures = 0
        self.parts = 0
        self.final: RequestRecord | None = None
        self.inflight: ModelRequest | None = None
        self.http: Any = None
        import random

        self.rng = random.Random(plan.seed)

    # ---- the session ----------------------------------------------------------------------------------

    async def run(self) -> SessionRecord:
        rec, plan = self.rec, self.plan
        try:
            t0 = self.clock.now()
            if plan.system_tokens:
                key = -1 if plan.shared_system else self._key()
                self.messages.append({"role": "system", "content": self.texts.text(plan.system_tokens, key)})
                self.ctx_tokens += plan.system_tokens
            self._add_user(plan.user_tokens)
            rec.context_ns += self.clock.now() - t0
            for step in plan.steps:
                if isinstance(step, ModelTurn):
                    if step.user_tokens:
                        self._add_user(step.user_tokens)
                    if plan.live is None:
                        self.final = await self._model(step.name, step.output_tokens, step.timeout_s)
                    else:
                        self.final = await self._live(step)
                elif isinstance(step, Action):
                    await self._action(step)
                else:
                    await self._think(step)
            rec.status = S_OK
        except _Stop as stop:
            rec.status, rec.error = stop.status, stop.reason
        except asyncio.CancelledError:
            rec.status = CANCELLED
            if self.inflight is not None:
                self._cancelled_record(self.inflight)
            raise
        finally:
            rec.end_ns = self.clock.now()
            if self.http is not None:
                await self.http.close()
        rec.accepted = self._accepted()
        return rec

    def _accepted(self) -> bool:
        if self.rec.status != S_OK:
            return False
        acc = self.plan.acceptance
        if acc is None or self.final is None:
            return True
        ok, why = acc.check(self.final.output_text, self.final.completion_tokens)
        if not ok:
            self.rec.error = why
        return ok

    # ---- helpers ----------------------------------------------------------------------------------------

    def _key(self) -> int:
        self.parts += 1
        return (self.plan.session_id << 20) | self.parts

    def _add_user(self, tokens: int) -> None:
        if tokens > 0:
            self.pending.append(self.texts.text(tokens, self._key()))
            self.ctx_tokens += tokens

    def _remaining_s(self) -> float | None:
        if self.deadline_ns is None:
            return None
        left = (self.deadline_ns - self.clock.now()) / NS_PER_S
        if left <= 0:
            raise _Stop(S_TIMED_OUT, f"session deadline {self.plan.policy.deadline_s}s passed")
        return left

    def _limit(self, step_timeout: float | None) -> tuple[float | None, bool]:
        """The wait allowed for one attempt, and whether the session deadline (not the step) sets it."""
        left = self._remaining_s()
        if left is None or (step_timeout is not None and step_timeout <= left):
            return step_timeout, False
        return left, True

    def _failed_attempt(self, what: str) -> None:
        self.failures += 1
        k = self.plan.policy.give_up_after
        if k is not None and self.failures >= k:
            raise _Stop(S_FAILED, f"gave up after {self.failures} failed attempts (last: {what})")

    async def _backoff(self, retry: int) -> None:
        wait = self.plan.policy.backoff(retry, self.rng.random())
        if wait <= 0:
            return
        t0 = self.clock.now()
        left = self._remaining_s()
        try:
            if left is not None and wait >= left:
                await self.clock.sleep(left)
                raise _Stop(S_TIMED_OUT, f"session deadline {self.plan.policy.deadline_s}s passed in backoff")
            await self.clock.sleep(wait)
        finally:
            self.rec.waiting_ns += self.clock.now() - t0

    # ---- steps -------------------------------------------------------------------------------------------

    async def _model(self, name: str, output_tokens: int, timeout_s: float | None) -> RequestRecord:
        rec, plan = self.rec, self.plan
        if self.pending:
            self.messages.append({"role": "user", "content": "\n\n".join(self.pending)})
            self.pending.clear()
        tries = 1 + plan.policy.max_retries
        for attempt in range(tries):
            limit, by_deadline = self._limit(timeout_s)
            now = self.clock.now()
            req = ModelRequest(
                request_id=self.ids.next(),
                api=self.api,
                messages=list(self.messages),
                max_tokens=output_tokens,
                min_tokens=output_tokens if plan.ignore_eos else None,
                ignore_eos=plan.ignore_eos,
                temperature=plan.temperature,
                stream=self.stream,
                est_prompt_tokens=self.ctx_tokens,
                session_id=plan.session_id,
                turn=rec.turns,
                attempt=attempt,
                warmup=self.warmup,
                intended_ns=self.intended_ns if rec.requests == 0 else now,
                extra_body=self.extra_body,
            )
            self.inflight = req
            if limit is None:
                r = await self.tr.send(req)
            else:
                try:
                    r = await asyncio.wait_for(self.tr.send(req), limit)
                except TimeoutError:
                    r = self._timeout_record(req, now, limit, by_deadline)
            self.inflight = None
            rec.add_request(r, now, self.clock.now())
            self.emit(r)
            if r.status == OK:
                rec.turns += 1
                out = r.completion_tokens
                if r.tool_calls:
                    self.messages.append({"role": "assistant", "content": r.output_text or None,
                                          "tool_calls": r.tool_calls})
                else:
                    text = r.output_text or self.texts.text(out, self._key())
                    self.messages.append({"role": "assistant", "content": text})
                self.ctx_tokens += out
                return r
            if r.status == TIMEOUT:
                rec.timeouts += 1
                if by_deadline:
                    raise _Stop(S_TIMED_OUT, f"session deadline {plan.policy.deadline_s}s passed in {name}")
            what = f"model step {name}: {r.status}" + (f" ({r.error})" if r.error else "")
            self._failed_attempt(what)
            if attempt + 1 < tries:
                rec.retries += 1
                await self._backoff(attempt + 1)
        raise _Stop(S_FAILED, f"{what}; failed {tries} attempt(s)")

    def _timeout_record(self, req: ModelRequest, t0: int, limit: float, by_deadline: bool) -> RequestRecord:
        why = "session deadline" if by_deadline else "step timeout"
        return ended_record(req, TIMEOUT, end_ns=self.clock.now(), error=f"{why} after {limit:.3f}s",
                            sent_ns=t0)

    def _cancelled_record(self, req: ModelRequest) -> None:
        self.rec.requests += 1
        self.emit(ended_record(req, CANCELLED, end_ns=self.clock.now(), error="session cancelled"))

    async def _live(self, step: ModelTurn) -> RequestRecord:
        """One model step in live mode: ask, run the tool calls, ask again, until a plain answer."""
        live = self.plan.live
        assert live is not None
        for turn in range(live.max_turns):
            name = step.name if turn == 0 else f"{step.name}.live{turn}"
            r = await self._model(name, step.output_tokens, step.timeout_s)
            calls = r.tool_calls
            if not calls:
                return r
            if turn + 1 == live.max_turns:
                if live.fail_at_max:
                    raise _Stop(
                        S_FAILED,
                        f"model step {step.name}: the model still called tools "
                        f"({', '.join(_call_name(c) for c in calls)}) after max_turns {live.max_turns}",
                    )
                del self.messages[-1]["tool_calls"]  # keep a valid conversation: no call without a result
                if self.messages[-1]["content"] is None:
                    self.messages[-1]["content"] = ""
                return r
            for call in calls:
                text = await self._action(live.action(_call_name(call)), live=True)
                self.messages.append({"role": "tool", "tool_call_id": call.get("id") or "", "content": text})
        raise AssertionError("unreachable")  # pragma: no cover

    async def _action(self, a: Action, live: bool = False) -> str:
        """Run one action with retries; its result text (live: returned only; else queued for the model)."""
        rec, pol = self.rec, self.plan.policy
        tries = len(a.failures)
        field = _TIME_FIELD[a.kind]
        for attempt in range(tries):
            limit, by_deadline = self._limit(a.timeout_s)
            t0 = self.clock.now()
            rec.tool_calls += 1
            try:
                if a.command or a.url:
                    ok, timed_out, err = await self._real(a, limit)
                else:
                    ok, timed_out, err = await self._simulated(a, attempt, limit)
            finally:
                setattr(rec, field, getattr(rec, field) + self.clock.now() - t0)
            if ok:
                text = self.texts.text(a.result_tokens, self._key())
                if not live:
                    self.pending.append(text)
                self.ctx_tokens += a.result_tokens
                return text
            rec.tool_failures += 1
            if timed_out:
                rec.timeouts += 1
                if by_deadline:
                    raise _Stop(
                        S_TIMED_OUT, f"session deadline {pol.deadline_s}s passed in {a.kind} {a.name}"
                    )
            what = f"{a.kind} step {a.name}: {err}"
            self._failed_attempt(what)
            if a.error_tokens and not live:
                self.pending.append(self.texts.text(a.error_tokens, self._key()))
                self.ctx_tokens += a.error_tokens
            if attempt + 1 < tries:
                rec.retries += 1
                if pol.correction and not live and attempt < len(a.correction_tokens):
                    await self._model(f"{a.name}.correction{attempt + 1}", a.correction_tokens[attempt], None)
                await self._backoff(attempt + 1)
        raise _Stop(S_FAILED, f"{what}; failed {tries} attempt(s)")

    async def _simulated(self, a: Action, attempt: int, limit: float | None) -> tuple[bool, bool, str]:
        dur = a.durations_s[attempt]
        if limit is not None and dur > limit:
            await self.clock.sleep(limit)
            return False, True, f"timed out after {limit:.3f}s"
        await self.clock.sleep(dur)
        if a.failures[attempt]:
            return False, False, "failed (simulated)"
        return True, False, ""

    async def _real(self, a: Action, limit: float | None) -> tuple[bool, bool, str]:
        if a.command:
            return await _run_command(a.command, limit)
        if self.http is None:
            import aiohttp

            self.http = aiohttp.ClientSession()
        return await _run_url(self.http, a.url or "", a.method, a.body, limit)

    async def _think(self, t: Think) -> None:
        t0 = self.clock.now()
        left = self._remaining_s()
        try:
            if left is not None and t.duration_s >= left:
                await self.clock.sleep(left)
                raise _Stop(S_TIMED_OUT, f"session deadline {self.plan.policy.deadline_s}s passed in think")
            await self.clock.sleep(t.duration_s)
        finally:
            self.rec.think_ns += self.clock.now() - t0


def _call_name(call: dict[str, Any]) -> str:
    fn = call.get("function")
    return str(fn.get("name") or "") if isinstance(fn, dict) else ""


# ---- real tool execution (wall clock only) ---------------------------------------------------------------


async def _run_command(argv: tuple[str, ...], limit: float | None) -> tuple[bool, bool, str]:
    """Run ``argv`` (no shell); (ok, timed_out, error). Exit status 0 is success."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
    except OSError as e:
        return False, False, f"cannot start {argv[0]!r}: {e.strerror or e}"
    try:
        code = await asyncio.wait_for(proc.wait(), limit)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return False, True, f"command timed out after {limit:.3f}s"
    except asyncio.CancelledError:
        proc.kill()
        await proc.wait()
        raise
    return (code == 0), False, "" if code == 0 else f"command exited with status {code}"


async def _run_url(
    http: Any, url: str, method: str, body: str | None, limit: float | None
) -> tuple[bool, bool, str]:
    """GET/POST ``url``; (ok, timed_out, error). HTTP status below 400 is success."""
    import aiohttp

    try:
        async with asyncio.timeout(limit):
            async with http.request(method, url, data=body) as resp:
                await resp.read()
                status = resp.status
    except TimeoutError:
        return False, True, f"{method} {url} timed out after {limit:.3f}s"
    except (aiohttp.ClientError, OSError) as e:
        return False, False, f"{method} {url} failed: {e}"
    return status < 400, False, "" if status < 400 else f"{method} {url} returned HTTP {status}"

