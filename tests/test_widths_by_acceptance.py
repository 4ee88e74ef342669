"""widths_by_acceptance: the acceptance controller (pure, no SGLang): its model, its settings,
when it decides, that it agrees with itself (as ranks must), and that it finds the width with
the most committed tokens per second on steps whose cost grows with their tokens."""

import logging
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_spec_plugins.widths_by_acceptance import (
    AcceptanceSettings,
    WidthsByAcceptance,
    WidthsByAcceptanceError,
    acceptance_from,
    expected_committed,
)
from sglang_spec_plugins.widths_by_batch_size import WidthsByBatchSize, padded_size

TABLE = WidthsByBatchSize.parse({1: [1, 2, 4, 8, 16], 8: [1, 2, 4, 8], 64: [1, 2]})
QUICK = AcceptanceSettings(warmup_steps=2, interval_steps=2)


@given(st.floats(0.0, 1.0), st.integers(1, 64))
def test_committed_tokens_rise_with_the_width_and_flatten(a, w):
    assert 1.0 <= expected_committed(a, w) <= w
    assert expected_committed(a, w + 1) - expected_committed(a, w) == pytest.approx(a ** w)


@given(st.floats(0.01, 0.99), st.integers(2, 32))
def test_acceptance_inverts_the_committed_tokens(a, w):
    assert acceptance_from(expected_committed(a, w), w) == pytest.approx(a, abs=1e-9)


def test_acceptance_at_the_edges():
    assert acceptance_from(1.0, 4) == 0.0 and acceptance_from(0.5, 4) == 0.0
    assert acceptance_from(4.0, 4) == 1.0 and acceptance_from(9.0, 4) == 1.0
    assert acceptance_from(3.0, 1) == 0.0  # width 1 drafts nothing


def test_settings():
    assert AcceptanceSettings.parse(True) == AcceptanceSettings()
    assert AcceptanceSettings.parse(False) is None
    parsed = AcceptanceSettings.parse({"interval_steps": 8, "margin": 0, "ema_weight": 0.5})
    assert (parsed.interval_steps, parsed.margin, parsed.ema_weight, parsed.warmup_steps) == (8, 0.0, 0.5, 8)
    assert AcceptanceSettings().as_plain()["log_every"] == 32


@pytest.mark.parametrize("value, message", [
    ("yes", "expected true, false or a table of settings, got 'yes'"),
    ({"intervals": 4}, r"unknown setting 'intervals' \(did you mean 'interval_steps'\?\); known: ema_weight, warmup_steps"),
    ({"interval_steps": 0}, "interval_steps must be an integer >= 1, got 0"),
    ({"warmup_steps": 2.0}, "warmup_steps must be an integer >= 0, got 2.0"),
    ({"probe_after": True}, "probe_after must be an integer >= 1, got True"),
    ({"ema_weight": 0}, "ema_weight must be above 0 and at most 1, got 0"),
    ({"ema_weight": 1.5}, "ema_weight must be above 0 and at most 1, got 1.5"),
    ({"margin": -0.1}, "margin must be >= 0, got -0.1"),
    ({"explore": float("nan")}, "explore must be a number, got nan"),
    ({"margin": "3%"}, "margin must be a number, got '3%'"),
])
def test_bad_settings(value, message):
    with pytest.raises(WidthsByAcceptanceError, match=message):
        AcceptanceSettings.parse(value)


def run(controller, slot, steps, acceptance, seconds, batch=64, rng=None, size=None):
    """Serve ``steps`` steps of ``batch`` requests in ``slot``: each request commits what ``acceptance``
    gives (its mean, or a draw per request with ``rng``); a step at width w takes ``seconds(w)``, on the
    graph of ``size`` (left out: eager, the batch's own size). The interval's seconds reach ``decide``
    as a worker hands them, by (size, width). Returns the widths, step by step."""
    widths, times = [], {}
    for _ in range(steps):
        w = controller.width(slot)
        widths.append(w)
        if rng is None:
            committed = round(expected_committed(acceptance, w) * batch)
        else:
            committed = sum(1 + next((k for k in range(w - 1) if rng.random() >= acceptance), w - 1) for _ in range(batch))
        controller.observe(slot, w, committed, batch, size)
        times.setdefault((batch if size is None else size, w), []).append(seconds(w))
        if controller.due(slot):
            controller.decide(slot, {k: sum(v) / len(v) for k, v in times.items()})
            times = {}
    return widths


def test_no_decision_in_the_warm_up_then_one_every_interval():
    c = WidthsByAcceptance(TABLE, AcceptanceSettings(warmup_steps=3, interval_steps=2))
    due = []
    for _ in range(9):
        c.observe(0, c.width(0), 4, 1)
        due.append(c.due(0))
    assert due == [False, False, False, False, True, False, True, False, True]


def test_each_slot_starts_at_its_middle_candidate():
    c = WidthsByAcceptance(TABLE, QUICK)
    assert [c.width(i) for i in range(3)] == [4, 2, 1]


@settings(max_examples=60, deadline=None)
@given(st.floats(0.05, 0.95), st.floats(0.0, 2.0), st.integers(0, 2))
def test_it_settles_within_the_margin_of_the_best_width(acceptance, cost_per_token, slot):
    """A step of w tokens per request costing 1 + k*w (flat where the GPU waits on memory, rising
    where it computes): after a while the slot sits at widths whose committed tokens per second are
    within the hysteresis margin of the best candidate's, leaving them only to time a neighbour again."""
    c = WidthsByAcceptance(TABLE, QUICK)
    cost = lambda w: 1.0 + cost_per_token * w  # noqa: E731
    widths = run(c, slot, 120, acceptance, cost, batch=10 ** 6)  # committed tokens nearly their mean
    rate = {w: expected_committed(acceptance, w) / cost(w) for w in TABLE.widths[slot]}
    tail = widths[-20:]
    settled = max(set(tail), key=tail.count)
    good = {w for w in rate if rate[w] * (1 + QUICK.margin) >= max(rate.values()) * (1 - 1e-4)}
    assert settled in good, (tail, rate)
    assert sum(w not in good for w in tail) <= len(tail) // 4, (tail, rate)  # but briefly re-measuring a neighbour


@settings(max_examples=30, deadline=None)
@given(st.floats(0.1, 0.95), st.floats(0.0, 1.0), st.integers(0, 2 ** 32 - 1))
def test_it_settles_near_the_best_width_when_acceptance_is_noisy(acceptance, cost_per_token, seed):
    """The same with each request's accepted drafts drawn (64 requests a step): the last quarter's
    rate is within 10% of the best candidate's."""
    c = WidthsByAcceptance(TABLE, AcceptanceSettings())
    cost = lambda w: 1.0 + cost_per_token * w  # noqa: E731
    widths = run(c, 0, 240, acceptance, cost, rng=random.Random(seed))
    rate = {w: expected_committed(acceptance, w) / cost(w) for w in TABLE.widths[0]}
    tail = widths[-60:]
    assert sum(rate[w] for w in tail) / len(tail) >= 0.9 * max(rate.values()), (tail, rate)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 128), st.floats(0.0, 1.0), st.floats(1e-3, 1.0)),
                min_size=1, max_size=80))
def test_two_controllers_fed_the_same_steps_choose_the_same_widths(steps):
    """What keeps tensor-parallel ranks together: the widths are a function of what was fed in
    (the steps' graph sizes among it)."""
    a, b = WidthsByAcceptance(TABLE, QUICK, log=False), WidthsByAcceptance(TABLE, QUICK, log=False)
    for slot, requests, accepted, seconds in steps:
        chosen = a.width(slot)
        assert b.width(slot) == chosen and chosen in TABLE.widths[slot]
        committed = requests + round(accepted * (chosen - 1) * requests)
        size = padded_size(requests, (1, 8, 32, 64, 128))
        for c in (a, b):
            c.observe(slot, chosen, committed, requests, size)
            if c.due(slot):
                c.decide(slot, {(size, chosen): seconds})
    assert [a.width(i) for i in range(3)] == [b.width(i) for i in range(3)] and a.switches == b.switches


def test_plain_decoding_when_speculation_loses_and_a_probe_later():
    """Nothing accepted and every token costs: the slot goes down to width 1 (plain decoding) and
    stays, trying its next width for one interval every probe_after decisions."""
    c = WidthsByAcceptance(TABLE, AcceptanceSettings(warmup_steps=2, interval_steps=2, probe_after=4))
    widths = run(c, 1, 60, 0.0, lambda w: 1.0 + 0.5 * w, batch=8)
    assert widths[:3] == [2, 2, 2] and widths[-1] == 1
    ones = widths[widths.index(1):]
    assert 2 in ones and ones.count(2) <= len(ones) // 4  # probes, briefly


def test_a_time_measured_once_too_slow_is_measured_again():
    """A width whose first interval ran slow (a one-off: 10 s a step where it costs 2) is not ruled out for good:
    once its time is older than retime_after decisions the slot tries it again, and climbs to the best width (8).
    With times kept for ever (retime_after beyond the run) the slot never leaves widths 1-2 again."""
    def first_interval_at_4_slow(settings):
        c, seen = WidthsByAcceptance(TABLE, settings), []

        def seconds(w):
            seen.append(w)
            return 10.0 if w == 4 and seen.count(4) <= settings.interval_steps else 1.0 + 0.25 * w
        return run(c, 1, 200, 0.9, seconds, batch=10 ** 6)

    widths = first_interval_at_4_slow(AcceptanceSettings(warmup_steps=2, interval_steps=2, retime_after=16))
    assert 4 in widths[:10] and widths[-10:].count(8) >= 8, widths
    kept = first_interval_at_4_slow(AcceptanceSettings(warmup_steps=2, interval_steps=2, retime_after=1000))
    assert max(kept[20:]) <= 2, kept


def test_acceptance_that_comes_back_is_found_by_the_probe():
    c = WidthsByAcceptance(TABLE, AcceptanceSettings(warmup_steps=2, interval_steps=2, probe_after=3))
    cost = lambda w: 1.0 + 0.05 * w  # noqa: E731
    assert run(c, 1, 40, 0.0, cost, batch=8)[-12:].count(1) >= 8
    assert run(c, 1, 60, 0.9, cost, batch=8)[-1] == 8


def test_a_new_slot_starts_from_the_latest_acceptance():
    c = WidthsByAcceptance(TABLE, QUICK)
    run(c, 0, 20, 0.9, lambda w: 1.0)
    assert c.describe().startswith("1+ requests: width 16 of [1, 2, 4, 8, 16] (committed ")
    c.width(1)
    assert "8+ requests: width 2 of [1, 2, 4, 8] (committed 1.90 per request, acceptance 0.90)" in c.describe()


def test_a_step_at_another_width_informs_the_slot_s_own():
    c = WidthsByAcceptance(TABLE, AcceptanceSettings(warmup_steps=0, interval_steps=1, ema_weight=1.0))
    assert c.width(0) == 4
    c.observe(0, 8, round(expected_committed(0.8, 8) * 10), 10)  # a worker chose 8 this step
    c.decide(0, {(10, 8): 1.0})
    assert "acceptance 0.80" in c.describe()


def test_the_log_line_shows_the_time_of_every_size_and_width_counted_as_measured():
    c = WidthsByAcceptance(TABLE, AcceptanceSettings(warmup_steps=0, interval_steps=1, ema_weight=1.0, explore=0.0))
    c.observe(0, 4, 25, 10)
    c.decide(0, {(10, 4): 0.010, (10, 8): 0.0125})
    assert "1+ requests: width 4 of [1, 2, 4, 8, 16] (committed 2.50 per request, acceptance " in c.describe()
    assert c.describe().endswith("latest size 10, ms per step at size 10 width 4: 10.00, width 8: 12.50)")
    c.observe(0, 4, 100, 40, 64)
    c.decide(0, {(64, 4): 0.020})
    assert c.describe().endswith("latest size 64, ms per step at size 10 width 4: 10.00, width 8: 12.50, "
                                 "size 64 width 4: 20.00)")
    assert "\n" not in c.describe() and "; " not in c.describe()  # one line; "; " parts slots


CONFOUND = WidthsByBatchSize.parse({1: [1, 2, 4, 8], 64: [2, 4, 8]})
"""Slot 1 covers batches of 33-128 under graphs of 1, 8, 32, 64 and 128: they replay the graph of 64 or of 128."""


def test_widths_timed_at_another_graph_size_are_not_compared():
    """The confound seen on an H200: an engine serves a cell of 100 requests (the graph of 128), then one of 64
    (the graph of 64). The slot times width 4 at 128 only, moves to 8 and times 8 at 64 only. At 64, width 4
    (10 ms) beats 8 (12 ms) at acceptance 0.6; width 4's 16 ms at 128 says nothing about it there. Compared at
    the size of its steps, the slot predicts 4 from 8's time at 64 and moves to it; the old rule (one time per
    width, whatever graph it was timed on: every step reported at one size) kept 8, 4 looking slow at 16 ms."""
    seconds = {(64, 4): 0.010, (64, 8): 0.012, (128, 4): 0.016, (128, 8): 0.022}
    rate = {w: expected_committed(0.6, w) / seconds[(64, w)] for w in (4, 8)}
    assert rate[4] > rate[8] * (1 + AcceptanceSettings().margin)  # at 64, 4 is the better width

    def serve(size_of):
        c = WidthsByAcceptance(CONFOUND, AcceptanceSettings(warmup_steps=0, interval_steps=1, ema_weight=1.0), log=False)
        assert c.width(1) == 4
        c.observe(1, 4, round(expected_committed(0.9, 4) * 100), 100, size_of(128))
        assert c.decide(1, {(size_of(128), 4): seconds[(128, 4)]}) == 8  # 8 predicted the faster at acceptance 0.9
        c.observe(1, 8, round(expected_committed(0.6, 8) * 64), 64, size_of(64))
        return c.decide(1, {(size_of(64), 8): seconds[(64, 8)]}), c.describe()

    decision, line = serve(lambda size: size)
    assert decision == 4, line
    assert line.endswith("latest size 64, ms per step at size 64 width 8: 12.00, size 128 width 4: 16.00)")
    assert serve(lambda size: 1)[0] is None  # the old rule stays at 8


def test_two_cells_one_after_another_each_at_its_own_graph_size():
    """200 steps of 100 requests on the graph of 128 (a step of w tokens 4 + 4w ms: width 4 the best, 8 timed
    now and then), then 64 requests on the graph of 64 (4 + w ms: width 8 the best by 10%), acceptance 0.9.
    The slot moves to 8 at its first decision at 64; the old rule (every step at one size) held 4 for 84
    steps, 8's 36 ms at 128 still counted as its time."""
    def cells(size_of):
        c = WidthsByAcceptance(CONFOUND, AcceptanceSettings(), log=False)
        run(c, 1, 200, 0.9, lambda w: 0.004 + 0.004 * w, batch=100, size=size_of(128))
        return run(c, 1, 200, 0.9, lambda w: 0.004 + 0.001 * w, batch=64, size=size_of(64))

    at_64 = cells(lambda size: size)
    assert at_64[:4] == [4] * 4 and at_64.count(8) >= 190, at_64
    old = cells(lambda size: 1)
    assert old[:80] == [4] * 80, old


def test_a_size_without_a_measured_width_is_compared_at_the_nearest_measured_size():
    """A step whose time was not read (a mark inside a capture) leaves its size unmeasured: the decision
    compares the widths at the nearest size timed (the smaller of two as near), else all alike."""
    table = WidthsByBatchSize.parse({1: [2, 4, 8]})
    stays = {4: 0.008, 8: 0.012}  # acceptance 0.7: width 4 the best
    moves = {4: 0.020, 8: 0.021}  # 8 the best

    def decision(times, latest=64):
        c = WidthsByAcceptance(table, AcceptanceSettings(warmup_steps=0, interval_steps=1, ema_weight=1.0), log=False)
        c.observe(0, 4, round(expected_committed(0.7, 4) * 10 ** 6), 10 ** 6, latest)
        return c.decide(0, {(size, w): t for size, by_width in times.items() for w, t in by_width.items()})

    assert decision({32: stays, 128: moves}) is None  # 32 is the nearer
    assert decision({32: moves, 128: stays}) == 8
    assert decision({32: stays, 96: moves}) is None and decision({32: moves, 96: stays}) == 8  # as near: the smaller
    assert decision({64: stays, 32: moves}) is None  # its own size first
    assert decision({}) == 8  # nothing timed: acceptance alone (width 8 commits the most)
    unobserved = WidthsByAcceptance(table, AcceptanceSettings(warmup_steps=0, interval_steps=1), log=False)
    assert unobserved.decide(0, {(32, 4): 0.020, (32, 8): 0.0185, (128, 4): 0.008, (128, 8): 0.012}) == 8  # no step
    # observed (acceptance 0.5, the prior): the smallest size; at 128 it would have moved to 2


def test_a_width_timed_at_another_size_is_still_unmeasured_at_this_one():
    """At acceptance 0.75 width 8, predicted from 4's time alone, is within explore of 4 but not better: the
    slot tries it for an interval, though 8 was timed (slowly) at size 128; the old rule counted that time."""
    c = WidthsByAcceptance(WidthsByBatchSize.parse({1: [2, 4, 8]}),
                           AcceptanceSettings(warmup_steps=0, interval_steps=1, ema_weight=1.0), log=False)
    c.observe(0, 4, round(expected_committed(0.75, 4) * 10 ** 6), 10 ** 6, 64)
    assert c.decide(0, {(64, 4): 0.010, (128, 8): 0.050}) == 8


def test_an_info_line_every_log_every_switches_and_none_when_quiet(caplog):
    caplog.set_level(logging.INFO, "sglang_spec_plugins")
    loud = WidthsByAcceptance(TABLE, AcceptanceSettings(warmup_steps=0, interval_steps=1, log_every=2), "ALGO")
    quiet = WidthsByAcceptance(TABLE, AcceptanceSettings(warmup_steps=0, interval_steps=1, log_every=2), "ALGO", log=False)
    for c in (loud, quiet):
        run(c, 0, 30, 0.9, lambda w: 1.0 + 0.01 * w)
    assert loud.switches == quiet.switches >= 2
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(infos) == loud.switches // 2
    assert infos[0].startswith("sglang-spec-plugins: ALGO widths by acceptance after 2 switches: 1+ requests: width ")
    assert math.isfinite(loud.switches)
