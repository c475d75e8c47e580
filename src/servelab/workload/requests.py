"""Single-turn request plans: what request ``i`` of a run sends, deterministic by seed and index.

Plans are produced lazily, one per index, with no counter call after the synthesizer's calibration, so
100k requests cost memory only as they are used. Lengths are drawn in vectorized chunks of 1,024 indices,
each chunk from its own seeded generator, so ``plan(i)`` does not depend on which plans came before.

Shared prefixes: request ``i`` belongs to group ``i % groups``; every request of a group starts with the
same prefix text of ``shared_prefix.tokens`` tokens, and groups have different prefixes. The sampled
``input_tokens`` are the tokens after the prefix.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from servelab.config.models import RunConfig, WorkloadConfig
from servelab.workload.prompts import Prompt, PromptSynthesizer
from servelab.workload.sampling import int_sample_n, make_sampler
from servelab.workload.tokens import CountFn, resolve_counter

_CHUNK = 1024
_STREAM_INPUT, _STREAM_OUTPUT = 0x11, 0x22


@dataclass(frozen=True, slots=True)
class RequestPlan:
    index: int
    prompt: str | None  # completions API: the whole prompt (system prompt first, when one is set)
    messages: list[dict[str, Any]] | None  # chat API: optional system message + the user message
    est_prompt_tokens: int  # the workload's count (system prompt + shared prefix + body)
    token_source: str  # where that count comes from: "server" | "local" | "estimate"
    max_tokens: int
    min_tokens: int | None  # = max_tokens when workload.ignore_eos, else None
    ignore_eos: bool
    temperature: float
    prefix_group: int | None  # shared-prefix group, None without shared_prefix
    prefix_tokens: int  # tokens of the shared prefix (0 without)

    def text(self) -> str:
        """The prompt as one string (messages joined)."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(str(m["content"]) for m in self.messages or ())


class _ChunkedLengths:
    """Integer lengths by index: chunk ``i // 1024`` drawn at once from generator (seed, stream, chunk)."""

    __slots__ = ("_dist", "_seed", "_stream", "_chunk", "_vals")

    def __init__(self, dist: object, seed: int, stream: int) -> None:
        self._dist, self._seed, self._stream = dist, seed, stream
        self._chunk = -1
        self._vals = np.zeros(0, dtype=np.int64)

    def __getitem__(self, i: int) -> int:
        c = i // _CHUNK
        if c != self._chunk:
            rng = np.random.default_rng([self._seed, self._stream, c])
            self._vals = int_sample_n(make_sampler(self._dist, rng), _CHUNK)
            self._chunk = c
        return int(self._vals[i - c * _CHUNK])


def requests_workload(config: RunConfig) -> WorkloadConfig:
    """The single-turn workload of ``config``; request plans exist for no other kind."""
    w = config.workload
    if not isinstance(w, WorkloadConfig):
        raise TypeError(f"request plans are built for a kind: requests workload, not kind: {w.kind}")
    return w


class RequestPlanner:
    """Builds ``RequestPlan`` for any index. Create with :func:`planner` (it calibrates first)."""

    def __init__(self, config: RunConfig, synth: PromptSynthesizer, system_tokens: int = 0) -> None:
        synth.calibration  # noqa: B018 - raises when calibrate() was not awaited
        self.config = config
        self.synth = synth
        self.workload = w = requests_workload(config)
        self._inputs = _ChunkedLengths(w.input_tokens, config.seed, _STREAM_INPUT)
        self._outputs = _ChunkedLengths(w.output_tokens, config.seed, _STREAM_OUTPUT)
        self._system = w.system_prompt
        self._system_tokens = system_tokens
        self._prefixes: dict[int, Prompt] = {}
        self._chat = config.target.api == "chat"

    def prefix(self, group: int) -> Prompt:
        """The shared prefix of ``group`` (built once, then cached)."""
        p = self._prefixes.get(group)
        if p is None:
            sp = self.workload.shared_prefix
            assert sp is not None
            p = self._prefixes[group] = self.synth.build(sp.tokens, index=group, kind=1, lead=True)
        return p

    def plan(self, index: int) -> RequestPlan:
        if index < 0:
            raise IndexError(f"request index must be >= 0, got {index}")
        w = self.workload
        group, prefix_tokens, text = None, 0, ""
        if w.shared_prefix is not None:
            group = index % w.shared_prefix.groups
            pre = self.prefix(group)
            prefix_tokens, text = pre.tokens, pre.text + " "
        body = self.synth.build(self._inputs[index], index=index, kind=0, lead=group is None)
        text += body.text
        est = self._system_tokens + prefix_tokens + body.tokens
        messages: list[dict[str, Any]] | None = None
        prompt: str | None = None
        if self._chat:
            messages = [{"role": "user", "content": text}]
            if self._system:
                messages.insert(0, {"role": "system", "content": self._system})
        else:
            prompt = f"{self._system}\n\n{text}" if self._system else text
        max_tokens = self._outputs[index]
        return RequestPlan(
            index=index, prompt=prompt, messages=messages, est_prompt_tokens=est,
            token_source=self.synth.source, max_tokens=max_tokens,
            min_tokens=max_tokens if w.ignore_eos else None, ignore_eos=w.ignore_eos,
            temperature=w.temperature, prefix_group=group, prefix_tokens=prefix_tokens,
        )

    def iter_plans(self, start: int = 0, stop: int | None = None) -> Iterator[RequestPlan]:
        """Plans ``start, start+1, ...`` (unbounded when ``stop`` is None: for duration-bound runs)."""
        i = start
        while stop is None or i < stop:
            yield self.plan(i)
            i += 1


class RequestPlans(Sequence[RequestPlan]):
    """A lazy, read-only sequence of ``n`` plans: each is built when indexed (nothing is stored)."""

    def __init__(self, planner: RequestPlanner, n: int) -> None:
        self.planner = planner
        self._n = n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> RequestPlan: ...

    @overload
    def __getitem__(self, i: slice) -> list[RequestPlan]: ...

    def __getitem__(self, i: int | slice) -> RequestPlan | list[RequestPlan]:
        if isinstance(i, slice):
            return [self.planner.plan(j) for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"request index {i} out of range for {self._n} plans")
        return self.planner.plan(i)

    def __iter__(self) -> Iterator[RequestPlan]:
        return self.planner.iter_plans(0, self._n)


async def planner(config: RunConfig, synth: PromptSynthesizer) -> RequestPlanner:
    """Calibrate ``synth`` (once) and count the system prompt (once); then plans need no counter calls."""
    await synth.calibrate()
    system = requests_workload(config).system_prompt
    system_tokens = (await synth.count(system) or 0) if system else 0
    return RequestPlanner(config, synth, system_tokens)


async def build_requests(config: RunConfig, n: int, synth: PromptSynthesizer) -> RequestPlans:
    """The first ``n`` request plans of a run, as a lazy sequence."""
    if n < 0:
        raise ValueError(f"build_requests needs n >= 0, got {n}")
    return RequestPlans(await planner(config, synth), n)


async def make_synthesizer(config: RunConfig, count_fn: CountFn | None = None) -> PromptSynthesizer:
    """A synthesizer on the best counter for ``config``: the target's ``count_fn`` (e.g.
    ``TargetProbe.count_tokens``), else ``target.tokenizer``, else an estimate; seeded by ``config.seed``."""
    counter = await resolve_counter(count_fn, config.target.tokenizer)
    return PromptSynthesizer(counter, config.seed)
