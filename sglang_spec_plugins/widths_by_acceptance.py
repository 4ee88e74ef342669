"""Widths by acceptance: each step's verify width from the acceptance seen so far (pure; no SGLang).

plugins.toml's ``widths_by_acceptance`` turns it on for a plugin algorithm
whose ``widths_by_batch_size`` gives its candidates: the controller keeps one
*slot* per bucket of that table, and a slot's candidates are the bucket's
widths (``{1 = [2, 4, 8, 16], 8 = [1, 2, 4, 8], 64 = [1, 2]}``; width 1
verifies only the request's last token, committing the target's next token:
plain decoding, the candidate for when speculation loses).

The model: a drafted token is accepted with probability ``a``, each
independently, so a step verifying ``w`` tokens (the last token and ``w - 1``
drafts) commits ``expected_committed(a, w) = 1 + a + ... + a**(w - 1)`` tokens
per request (the accepted drafts, then the target's own token). Per slot:

* every step (:meth:`WidthsByAcceptance.observe`) updates the EMA of the
  committed tokens per request at the slot's width (``ema_weight`` the newest
  step's weight); ``a`` is what that EMA says (:func:`acceptance_from`);
* every ``interval_steps`` steps after the first ``warmup_steps``
  (:meth:`~WidthsByAcceptance.due`), :meth:`~WidthsByAcceptance.decide` takes
  the mean seconds per step of each (size, width) the slot ran at since its
  last decision (an EMA per (size, width)), and predicts each candidate's
  committed tokens per second, ``E(w) / T(w)``, at one size: a step's *size*
  is the batch size of the CUDA graph it replays (a slot of 64-127 requests
  replays the graph of 64 or of 128, which cost differently at every width),
  or its own batch size where it runs eagerly; the caller says it with each
  step (:meth:`~WidthsByAcceptance.observe`). The size compared at is the size
  of the slot's latest step (what its next steps most likely run at); where no
  width counts as measured at that size, the nearest size where one does (the
  smaller of two as near), its times as they are (a decision compares the
  candidates' rates with each other, so one factor common to a size's times
  would change nothing); where none is, every width alike (acceptance alone
  decides). Times at other sizes never enter a decision: a width timed only
  at 128 is not compared with one timed at 64. The time of a width not timed
  at the size compared at is extrapolated linearly from the two widths
  measured there nearest it (from one measured width ``w0``:
  ``T(w0) * sqrt(w / w0)``, half-way between a step whose cost does not grow
  with its tokens and one whose cost grows in proportion). When the best
  candidate beats the slot's width by more than ``margin`` (the hysteresis)
  the slot moves one candidate towards it (``E`` rises and flattens with the
  width while ``T`` rises ever faster, so the rate has one peak and the path
  to it climbs); otherwise a neighbour unmeasured at that size and predicted
  within ``explore`` of the current width is tried for one interval, after
  which it is measured there. A (size, width)'s seconds count as measured for
  ``retime_after`` decisions after the slot last ran at it: an older time (one
  noisy interval, or a cost that has moved since) is predicted again like a
  width never run, so a neighbour it made look slow is tried again rather
  than ruled out for good;
* at width 1 no draft is verified, so nothing says whether acceptance has
  come back: after ``probe_after`` decisions there the slot tries its next
  width for one interval, its EMA started afresh from that interval's steps.

A slot's first estimate of ``a`` is the latest any slot made (acceptance is
the drafter's and the requests', not the batch size's), 0.5 before any.

Agreement across tensor-parallel ranks: a decision is a function of the
accept counts, the batch sizes, the steps' sizes, the step counts and the
seconds ``decide`` is given, in the order given, with Python floats. SGLang
computes the accept counts on every rank from the same logits (gathered
across ranks before the argmax) and schedules the same batches on every rank
(replayed on the same graphs), so those inputs agree; the seconds are each
rank's own clock, and the caller agrees them
(:mod:`sglang_spec_plugins.engine.step_times` averages them over the ranks at
each decision) before handing them in. Same inputs, same arithmetic: same
widths on every rank.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .errors import closest, is_plain_int
from .widths_by_batch_size import WidthsByBatchSize

logger = logging.getLogger("sglang_spec_plugins")

PRIOR_ACCEPTANCE = 0.5
"""The acceptance a slot assumes before any slot has measured one."""


class WidthsByAcceptanceError(ValueError):
    """``widths_by_acceptance`` settings that are not what :class:`AcceptanceSettings` takes."""


@dataclass(frozen=True)
class AcceptanceSettings:
    """The controller's knobs (plugins.toml ``widths_by_acceptance = {...}``;
    ``true`` takes them all as defaults). See the module doc for each."""

    ema_weight: float = 0.2
    warmup_steps: int = 8
    interval_steps: int = 4
    margin: float = 0.03
    explore: float = 0.1
    probe_after: int = 8
    retime_after: int = 32
    log_every: int = 32

    @classmethod
    def parse(cls, value: Any) -> Optional["AcceptanceSettings"]:
        """Settings from ``true`` (defaults), ``false`` (None: off) or a mapping of
        knobs; WidthsByAcceptanceError naming the knob that is wrong."""
        if value is True:
            return cls()
        if value is False:
            return None
        if not isinstance(value, Mapping):
            raise WidthsByAcceptanceError(f"expected true, false or a table of settings, got {value!r}")
        known = {f.name: f for f in fields(cls)}
        given: Dict[str, Any] = {}
        for key, setting in value.items():
            if key not in known:
                near = closest(str(key), known)
                raise WidthsByAcceptanceError(f"unknown setting {key!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
                                              + f"; known: {', '.join(known)}")
            given[key] = _checked(key, setting)
        return cls(**given)

    def as_plain(self) -> Dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_FRACTIONS = {"ema_weight": (0.0, 1.0, False)}  # (low, high, low allowed)
_NON_NEGATIVE_FLOATS = ("margin", "explore")
_COUNTS = {"warmup_steps": 0, "interval_steps": 1, "probe_after": 1, "retime_after": 1, "log_every": 1}  # smallest allowed


def _checked(key: str, value: Any) -> Any:
    if key in _COUNTS:
        if not is_plain_int(value) or value < _COUNTS[key]:
            raise WidthsByAcceptanceError(f"{key} must be an integer >= {_COUNTS[key]}, got {value!r}")
        return value
    if type(value) not in (int, float) or not math.isfinite(value):
        raise WidthsByAcceptanceError(f"{key} must be a number, got {value!r}")
    if key in _FRACTIONS and not 0.0 < value <= 1.0:
        raise WidthsByAcceptanceError(f"{key} must be above 0 and at most 1, got {value!r}")
    if key in _NON_NEGATIVE_FLOATS and value < 0:
        raise WidthsByAcceptanceError(f"{key} must be >= 0, got {value!r}")
    return float(value)


def expected_committed(acceptance: float, width: int) -> float:
    """Tokens a request commits per step verifying ``width`` tokens when each
    draft is accepted with probability ``acceptance``: ``sum(a**k, k < width)``."""
    if acceptance >= 1.0:
        return float(width)
    return (1.0 - acceptance ** width) / (1.0 - acceptance)


def acceptance_from(committed: float, width: int) -> float:
    """The acceptance at which a step of ``width`` commits ``committed`` tokens
    per request on average (:func:`expected_committed` inverted; 0 at 1
    token or fewer, 1 at ``width`` or more). Deterministic bisection."""
    if width <= 1 or committed <= 1.0:
        return 0.0
    if committed >= width:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(40):  # to 1e-12: far below what a step's counts say
        mid = (low + high) / 2
        if expected_committed(mid, width) < committed:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _predicted_seconds(timed: Mapping[int, float], width: int) -> float:
    """Seconds per step at ``width`` from the widths ``timed`` (see the module doc)."""
    if width in timed:
        return timed[width]
    measured = sorted(timed.items())
    if not measured:
        return 1.0  # no time yet: every width alike, acceptance alone decides
    if len(measured) == 1:
        (w0, t0), = measured
        return t0 * math.sqrt(width / w0)
    near = sorted(measured, key=lambda item: (abs(item[0] - width), item[0]))[:2]
    (w1, t1), (w2, t2) = sorted(near)
    predicted = t1 + (t2 - t1) * (width - w1) / (w2 - w1)
    return max(predicted, 0.25 * min(t for _, t in measured))


@dataclass
class _Slot:
    """One bucket's state."""

    candidates: Tuple[int, ...]
    width: int
    committed: float  # EMA of committed tokens per request at ``width``
    acceptance: float
    times: Dict[Tuple[int, int], Tuple[float, int]]  # per (size, width) run at: EMA of seconds per step, the decision
    # that last timed it
    size: Optional[int] = None  # the size of the latest step observed
    decisions: int = 0
    steps: int = 0  # steps observed
    decisions_at_one: int = 0  # decisions since the slot came to (or last probed from) width 1
    fresh: bool = False  # the next step starts the EMA afresh (the slot just left width 1: no estimate to keep)


class WidthsByAcceptance:
    """The controller of one worker (see the module doc). ``table`` gives the
    slots (its buckets) and their candidates; each slot starts at its middle
    candidate (the lower of two). ``name`` labels the log lines; ``log``
    False keeps this controller quiet (ranks other than the first)."""

    def __init__(self, table: WidthsByBatchSize, settings: AcceptanceSettings, name: str = "", log: bool = True):
        self.table, self.settings, self.name, self._log = table, settings, name, log
        self._slots: List[Optional[_Slot]] = [None] * len(table.bounds)
        self._latest_acceptance: Optional[float] = None
        self.switches = 0

    def width(self, slot: int) -> int:
        """The width the slot's next step verifies at."""
        return self._slot(slot).width

    def observe(self, slot: int, width: int, committed_total: int, requests: int, size: Optional[int] = None) -> None:
        """One step of ``slot`` at ``width`` (the slot's own, or another a worker
        chose): ``requests`` requests committed ``committed_total`` tokens together;
        ``size``: the batch size of the CUDA graph the step replayed (left out:
        ``requests``, a step run eagerly)."""
        if requests < 1:
            return
        s = self._slot(slot)
        s.steps += 1
        s.size = requests if size is None else size
        if width <= 1:
            return  # nothing was drafted: no acceptance to learn
        mean = committed_total / requests
        if width != s.width:  # what it says about the slot's own width
            mean = expected_committed(acceptance_from(mean, width), s.width)
        weight = 1.0 if s.fresh else self.settings.ema_weight
        s.committed, s.fresh = (1 - weight) * s.committed + weight * mean, False

    def due(self, slot: int) -> bool:
        """Whether the step just observed ends one of the slot's intervals (then
        the caller hands :meth:`decide` that interval's seconds per step)."""
        s, cfg = self._slot(slot), self.settings
        return s.steps > cfg.warmup_steps and (s.steps - cfg.warmup_steps) % cfg.interval_steps == 0

    def decide(self, slot: int, seconds: Mapping[Tuple[int, int], float]) -> Optional[int]:
        """The slot's decision: ``seconds`` is the mean seconds per step of each
        (size, width) it ran at in the interval (:meth:`.engine.step_times.StepClock.take`).
        Returns the new width, None to stay."""
        s, cfg = self._slot(slot), self.settings
        s.decisions += 1
        timed = self._timed(s)  # before this interval's times: an expired one is replaced, not blended
        s.times = {key: entry for key, entry in s.times.items() if key in timed}  # an expired one is never read again
        for key, value in sorted(seconds.items()):
            if value > 0 and math.isfinite(value):
                old = timed.get(key)
                s.times[key] = (value if old is None else (1 - cfg.ema_weight) * old + cfg.ema_weight * value,
                                s.decisions)
        if s.width > 1:
            s.acceptance = acceptance_from(s.committed, s.width)
            self._latest_acceptance = s.acceptance
        new = self._choice(s)
        if new == s.width:
            return None
        self._switch(slot, s, new)
        return new

    def describe(self) -> str:
        """One line of every slot's state, for the log: its width, candidates, committed tokens and
        acceptance, the size of its latest step, and the seconds per step of each (size, width) it
        counts as measured (``size 64 width 4: 10.00, width 8: 12.50, size 128 width 4: ...``, in ms)."""
        parts = []
        for bound, s in zip(self.table.bounds, self._slots):
            if s is None:
                continue
            times, size = [], None
            for (z, w), t in sorted(self._timed(s).items()):  # every (size, width) it counts as measured
                times.append(f"{'' if z == size else f'size {z} '}width {w}: {t * 1e3:.2f}")
                size = z
            parts.append(f"{bound}+ requests: width {s.width} of {list(s.candidates)} (committed {s.committed:.2f} per "
                         f"request, acceptance {s.acceptance:.2f}"
                         + ("" if s.size is None else f", latest size {s.size}")
                         + (f", ms per step at {', '.join(times)})" if times else ")"))
        return "; ".join(parts) or "no step yet"

    # -- the rule ---------------------------------------------------------

    def _choice(self, s: _Slot) -> int:
        cfg, i = self.settings, s.candidates.index(s.width)
        if s.width == 1 and len(s.candidates) > 1:
            s.decisions_at_one += 1
            if s.decisions_at_one >= cfg.probe_after:
                s.decisions_at_one = 0
                return s.candidates[1]  # probe: is speculation winning again?
        timed = self._timed_at(s)
        rate = {w: expected_committed(s.acceptance, w) / _predicted_seconds(timed, w) for w in s.candidates}
        best = max(s.candidates, key=lambda w: (rate[w], w == s.width, -w))
        if rate[best] > rate[s.width] * (1 + cfg.margin):
            return s.candidates[i + 1] if best > s.width else s.candidates[i - 1]  # one step towards it
        neighbours = s.candidates[max(0, i - 1):i] + s.candidates[i + 1:i + 2]
        unmeasured = [w for w in neighbours if w not in timed and rate[w] >= rate[s.width] * (1 - cfg.explore)]
        return max(unmeasured, key=lambda w: (rate[w], -w)) if unmeasured else s.width

    def _timed(self, s: _Slot) -> Dict[Tuple[int, int], float]:
        """The slot's seconds per step of the (size, width)s still counted as measured (see the module doc)."""
        return {key: t for key, (t, timed_at) in s.times.items() if s.decisions - timed_at <= self.settings.retime_after}

    def _timed_at(self, s: _Slot) -> Dict[int, float]:
        """The seconds per step by width at the size a decision compares at (see the module doc):
        the latest step's size, else the nearest size with a width measured (before any step is
        observed: the smallest); empty where none is."""
        timed = self._timed(s)
        sizes = sorted({z for z, _ in timed})
        if not sizes:
            return {}
        size = s.size if s.size in sizes else (
            sizes[0] if s.size is None else min(sizes, key=lambda z: (abs(z - s.size), z)))
        return {w: t for (z, w), t in timed.items() if z == size}

    def _switch(self, index: int, s: _Slot, new: int) -> None:
        if new == 1:
            s.decisions_at_one = 0
        s.committed = expected_committed(s.acceptance, new) if new > 1 else s.committed
        s.fresh = s.width == 1  # what width 1 kept of the acceptance is stale: the new width's steps say it anew
        old, s.width = s.width, new
        self.switches += 1
        if not self._log:
            return
        logger.debug("sglang-spec-plugins: %s widths by acceptance: %d+ requests: width %d -> %d", self.name,
                     self.table.bounds[index], old, new)
        if self.switches % self.settings.log_every == 0:
            logger.info("sglang-spec-plugins: %s widths by acceptance after %d switches: %s", self.name, self.switches,
                        self.describe())

    def _slot(self, index: int) -> _Slot:
        s = self._slots[index]
        if s is None:
            candidates = self.table.widths[index]
            width = candidates[(len(candidates) - 1) // 2]
            acceptance = PRIOR_ACCEPTANCE if self._latest_acceptance is None else self._latest_acceptance
            s = self._slots[index] = _Slot(candidates, width, expected_committed(acceptance, width), acceptance, {})
        return s

