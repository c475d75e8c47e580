"""Prompt text synthesized to a target token count.

The text is drawn from a fixed list of common English words (plus a few with punctuation), shuffled by
the seed, so real tokenizers count it the way they count ordinary prose. Calibration runs once per
synthesizer: each word's token cost is measured with the counter (as the first word of a text and as a
following word), then a few mixed probe texts check that costs add up and fit a linear correction where
they do not. After that a prompt of any length is built without calling the counter: words are drawn
until their costs sum exactly to the target. Where the probes showed that costs do not add up exactly and
the counter runs in process (``count_now``), each prompt is also measured and topped up or trimmed; a
counter that counts words only (the estimate's ``count_words``) is given the word count, so the text is
joined once, when the prompt is done.

Every prompt starts with a tag: a few words that spell its index in the shuffled vocabulary (least
significant digit first), so two prompts differ within their first words and a prefix cache sees only the
prefixes a workload shares on purpose.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from servelab.errors import TargetError
from servelab.workload.tokens import Source, SyncTokenCounter, TokenCounter, WordCounter

_WORDS = """
the of and to in is was for on that with as by at from this be are or an which have not it has
their were but one all they more also its can two new first been after other would who time some
there about most these only when many over into such used out year then three state work where
during between both under through while before each system city well may world part same since
high found later known called much number being group made area during within river public life
school early long people water three series four power city around large place best data light
model order point small based end line form course head house music game family party local
market report service value level field study common change control design human office paper plan
process program project question reason record result return science sense side sound space street
table test theory thing thought town trade type unit voice wall weather window winter wood word
answer animal basic bridge budget camera center chapter choice circle cloud coast color copper
corner cotton county crowd culture current dance debate degree desert detail device dinner doctor
drawing driver economy edge effort energy engine evening event example factor farm feature figure
finger flight floor flower forest garden gold grain ground growth guide habit harbor health heart
history holiday honey hospital hunter image income island journey judge kitchen ladder language
lawyer leader letter library limit machine manager matter meal memory metal method middle minute
mirror moment money morning mountain nation nature network night noise north object ocean orange
owner painter palace pattern period picture pilot planet pocket poem police powder practice pressure
price prison profit quality quarter radio range rate reader region rhythm river road rock routine
salt sample season second secret sector signal silver singer sister skill soil soldier source speed
spirit spring square stage station steel stone storm story student summer sun surface teacher
temple tennis thread ticket tool tower track traffic train travel tree truck union valley village
visit wave weight wheel wind winner worker writer yard youth agree allow appear argue arrive become
begin believe bring build carry catch cause choose climb collect compare contain continue create
decide describe develop discover divide draw drive earn enjoy enter explain fall feed finish follow
gather grow happen hold improve include increase join keep kill laugh learn leave listen live lose
measure meet mention move notice offer open own pass pay perform pick play prefer prepare present
produce protect provide pull push reach read receive remain remember repeat replace reply require
rest rise run save search seem sell send serve share show sing sit sleep solve speak spend stand
start stay stop study suggest supply support teach tell think throw touch travel treat turn
understand visit wait walk want wash watch wear win wish wonder write able active afraid ancient
angry bright broad brown busy calm careful certain cheap clean clear close cold common cool correct
dark dead deep direct dry eager early easy empty equal exact fair famous fast final fine foreign
free fresh full gentle glad golden grand great green happy hard heavy honest hot huge kind late
loud lucky main modern narrow natural near neat normal old open plain polite poor proud quick quiet
rapid rare ready real rich right rough round royal safe sharp short silent simple slow smooth soft
solid special strong sudden sweet tall thick thin tiny tired usual warm weak wide wild wise young
however, therefore, meanwhile, indeed, finally, today. tomorrow. again. together. outside. instead.
"""


def _base_words() -> list[str]:
    seen: dict[str, None] = {}
    for w in _WORDS.split():
        seen.setdefault(w, None)
    return list(seen)


ANCHOR = "the"  # a following word's cost is (count("the" + " word" * REPEAT) - count("the")) / REPEAT
REPEAT = 4  # repeating the word averages out counters that round per text (e.g. characters / 4)
LEAD_WORDS = 64  # prompts start with one of these (fewer words to calibrate as a first word)
_PROBE_WORDS = (48, 160, 480)
_CONCURRENCY = 8


@dataclass(frozen=True, slots=True)
class Calibration:
    source: Source
    calls: int  # counter calls made to calibrate
    alpha: float  # measured ~= alpha * predicted + beta, fitted on the probes
    beta: float
    probe_error: float  # largest |measured - predicted| / measured over the probes, before correction


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    tokens: int  # the synthesizer's count: measured where the counter runs in process, else predicted
    target: int


class PromptSynthesizer:
    """Builds prompt text of a target token count, deterministic by (seed, kind, index)."""

    def __init__(self, counter: TokenCounter, seed: int = 0) -> None:
        self.counter = counter
        self.seed = int(seed)
        words = _base_words()
        order = np.random.default_rng([self.seed, 0x5EED]).permutation(len(words))
        self.words: list[str] = [words[i] for i in order]
        self._word_array = np.array(self.words, dtype=object)  # joined by index arrays (see _join)
        self._lock = asyncio.Lock()
        self._cal: Calibration | None = None
        self._now = counter.count_now if isinstance(counter, SyncTokenCounter) else None
        # Vocabulary words hold no whitespace, so a text of k of them splits into k words.
        self._words_now = counter.count_words if isinstance(counter, WordCounter) else None

    @property
    def source(self) -> Source:
        return self.counter.source

    @property
    def calibration(self) -> Calibration:
        if self._cal is None:
            raise RuntimeError("PromptSynthesizer.calibrate() must be awaited before building prompts")
        return self._cal

    # ---- calibration (once) ----------------------------------------------------------------------

    async def _count_all(self, texts: list[str]) -> list[int]:
        sem = asyncio.Semaphore(_CONCURRENCY)

        async def one(t: str) -> int:
            async with sem:
                n = await self.counter.count(t)
            if n is None:
                raise TargetError(
                    f"the {self.counter.source} token counter stopped answering during calibration "
                    f"(no count for a {len(t.split())}-word text)",
                    hint="check the server's /tokenize endpoint, or set target.tokenizer to a local file",
                )
            return int(n)

        return list(await asyncio.gather(*(one(t) for t in texts)))

    async def calibrate(self) -> Calibration:
        """Measure word costs and fit the correction; idempotent (later calls return the first result)."""
        async with self._lock:
            if self._cal is not None:
                return self._cal
            leads = self.words[:LEAD_WORDS]
            texts = [ANCHOR] + [ANCHOR + f" {w}" * REPEAT for w in self.words] + leads
            counts = await self._count_all(texts)
            anchor, follow, lead = counts[0], counts[1 : 1 + len(self.words)], counts[1 + len(self.words) :]
            self._set_costs((np.asarray(follow, np.float64) - anchor) / REPEAT, np.asarray(lead, np.float64))
            rng = np.random.default_rng([self.seed, 0xCA1])
            probes = [self._draw(rng, float(n) * self._mean_cost, lead=True) for n in _PROBE_WORDS]
            measured = await self._count_all([self._join(p) for p in probes])
            predicted = [self._cost_of(p, lead=True) for p in probes]
            err = max(abs(m - p) / m for m, p in zip(measured, predicted, strict=True))
            alpha, beta = 1.0, 0.0
            if err > 0:
                alpha, beta = (float(x) for x in np.polyfit(predicted, measured, 1))
                if not 0.25 <= alpha <= 4.0:  # a wild fit from noisy probes: keep a plain ratio
                    alpha, beta = sum(measured) / sum(predicted), 0.0
            self._cal = Calibration(self.counter.source, len(texts) + len(probes), alpha, beta, err)
            return self._cal

    def _set_costs(self, follow: np.ndarray, lead: np.ndarray) -> None:
        usable = np.flatnonzero(follow >= 0.5)
        if len(usable) < 16 or not np.any(lead >= 0.5):
            raise TargetError(
                f"the {self.counter.source} token counter gives implausible counts: only {len(usable)} of "
                f"{len(follow)} common words add a token to a text",
                hint="check that the counter counts the text it is given (e.g. the server's /tokenize)",
            )
        self._follow = follow
        self._lead = lead
        self._usable = usable  # indices of words that can follow
        self._leads = np.flatnonzero(lead >= 0.5)  # indices of words that can start a text
        order = usable[np.argsort(follow[usable], kind="stable")]
        self._by_cost = order
        self._sorted_costs = follow[order]
        self._mean_cost = float(follow[usable].mean())

    def _cost_of(self, idx: list[int] | np.ndarray, *, lead: bool) -> float:
        if not len(idx):
            return 0.0
        first = self._lead[idx[0]] if lead else self._follow[idx[0]]
        return float(first + self._follow[idx[1:]].sum())

    # ---- building ---------------------------------------------------------------------------------
    # Word indices stay in numpy arrays from the draw to the join: a 50k-token prompt is ~37k words, and
    # turning them into Python ints and looking each one up cost more than drawing them.

    def _tag(self, value: int, lead: bool) -> list[int]:
        """Word indices spelling ``value``: first digit over the lead words (or all usable words), then
        digits over all usable words; at least three words."""
        usable = self._usable
        first_base = self._leads if lead else usable
        out = [int(first_base[value % len(first_base)])]
        value //= len(first_base)
        while value or len(out) < 3:
            out.append(int(usable[value % len(usable)]))
            value //= len(usable)
        return out

    def _draw(self, rng: np.random.Generator, budget: float, *, lead: bool, start: list[int] | None = None,
              ) -> np.ndarray:
        """Word indices (``start``, then more) whose costs sum to ``budget`` as exactly as the costs allow."""
        head = list(start or [])
        left = budget - self._cost_of(head, lead=lead)
        if not head and left > 0:  # the first word of a text costs its lead cost
            leads = self._leads
            i = (
                int(leads[rng.integers(len(leads))])
                if lead
                else int(self._usable[rng.integers(len(self._usable))])
            )
            head.append(i)
            left -= self._lead[i] if lead else self._follow[i]
        parts = [np.asarray(head, dtype=np.intp)]
        max_cost = float(self._sorted_costs[-1])
        while left >= max_cost:
            k = int(left / self._mean_cost) + 8
            pick = self._usable[rng.integers(len(self._usable), size=k)]
            csum = np.cumsum(self._follow[pick])
            m = int(np.searchsorted(csum, left - max_cost, side="right"))
            m = max(m, 1)
            parts.append(pick[:m])
            left -= float(csum[m - 1])
        tail: list[int] = []
        while left >= self._sorted_costs[0] - 1e-9:  # finish with words that still fit
            fits = int(np.searchsorted(self._sorted_costs, left + 1e-9, side="right"))
            i = int(self._by_cost[rng.integers(fits)])
            tail.append(i)
            left -= self._follow[i]
        parts.append(np.asarray(tail, dtype=np.intp))
        return np.concatenate(parts)

    def _measure(self, idx: np.ndarray, lead: bool) -> int:
        """The counter's count of the text of word indices ``idx`` (after ANCHOR when not ``lead``)."""
        by_words = self._words_now
        if by_words is not None:  # the same count as on the joined text, without building it
            return by_words(len(idx)) if lead else by_words(len(idx) + 1) - by_words(1)
        assert self._now is not None
        text = self._join(idx)
        if lead:
            return self._now(text)
        return self._now(f"{ANCHOR} {text}") - self._now(ANCHOR)

    def _join(self, idx: list[int] | np.ndarray) -> str:
        return " ".join(self._word_array[idx].tolist())

    def build(self, target: int, *, index: int, kind: int = 0, lead: bool = True) -> Prompt:
        """A prompt of ``target`` tokens for request (or prefix group) ``index``.

        ``kind`` separates streams that must not collide (0 request bodies, 1 shared prefixes); ``lead``
        is False for text that follows other text (a body after a shared prefix).
        """
        cal = self.calibration
        target = max(1, int(target))
        rng = np.random.default_rng([self.seed, 0xB0D7, kind, index])
        tag = self._tag(2 * index + (kind & 1), lead)
        while len(tag) > 1 and self._cost_of(tag, lead=lead) > target:
            tag.pop()
        budget = max((target - cal.beta) / cal.alpha, 0.0)
        idx = self._draw(rng, budget, lead=lead, start=tag)
        if self._now is None or cal.probe_error == 0:  # costs add up exactly: the prediction is the count
            predicted = cal.alpha * self._cost_of(idx, lead=lead) + cal.beta
            return Prompt(self._join(idx), max(1, round(predicted)), target)
        return self._checked(idx, len(tag), target, lead, rng)

    def _checked(
        self, idx: np.ndarray, keep: int, target: int, lead: bool, rng: np.random.Generator
    ) -> Prompt:
        """Measure with the in-process counter; top up or trim a few times; keep the closest."""
        best: tuple[int, np.ndarray, int] | None = None
        follow = self._follow
        for _ in range(4):
            n = self._measure(idx, lead)
            if best is None or abs(n - target) < abs(best[2] - target):
                best = (abs(n - target), idx, n)  # idx is never changed in place: new arrays below
            if n == target:
                break
            if n < target:
                extra = self._draw(rng, (target - n) / self.calibration.alpha, lead=False, start=[])
                if not len(extra):
                    extra = self._by_cost[:1]
                idx = np.concatenate([idx, extra])
            else:
                over = (n - target) / self.calibration.alpha
                end = len(idx)
                while end > keep and over > 0:
                    end -= 1
                    over -= follow[idx[end]]
                idx = idx[:end]
                if over < 0:  # trimmed past the target: refill the difference
                    idx = np.concatenate([idx, self._draw(rng, -over, lead=False, start=[])])
        assert best is not None
        return Prompt(self._join(best[1]), best[2], target)

    async def count(self, text: str) -> int | None:
        """Count any text with the synthesizer's counter (e.g. a fixed system prompt, once)."""
        if self._now is not None:
            return self._now(text)
        return await self.counter.count(text)
