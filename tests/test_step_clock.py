"""engine/step_times.StepClock (pure, no SGLang): what a step costs the acceptance controller, per graph
size and width, the scheduler's time after each step counted to that step's size and width."""

from sglang_spec_plugins.engine.step_times import HostTimer, StepClock
from sglang_spec_plugins.widths_by_acceptance import AcceptanceSettings, WidthsByAcceptance, expected_committed
from sglang_spec_plugins.widths_by_batch_size import WidthsByBatchSize


class Clock:
    def __init__(self):
        self.seconds = 0.0

    def __call__(self):
        return self.seconds


def test_the_time_after_a_step_is_that_step_s_width_s():
    """Steps at 4 and 8 in turn, 10 and 16 ms each, the scheduler 3 ms after a step at 4 and 6 ms after one
    at 8 (more tokens to take in): each width's time is its own step and the gap after it."""
    now = Clock()
    clock = StepClock(HostTimer(now))
    for width, span, gap in [(4, 0.010, 0.003), (8, 0.016, 0.006)] * 20:
        clock.start()
        now.seconds += span
        clock.stop(0, width, 64)
        now.seconds += gap
    times = clock.take(0)
    assert list(times) == [(64, 4), (64, 8)]
    assert abs(times[(64, 4)] - 0.013) < 1e-6 and abs(times[(64, 8)] - 0.022) < 1e-6, times


def test_a_width_at_two_graph_sizes_is_timed_at_each():
    """A slot's steps at width 4 on the graph of 64 (10 ms, 2 ms after) and of 128 (16 ms, 4 ms after) in
    turn: two times, each its own size's step and gap, in (size, width) order; a slot's take leaves the others'."""
    now = Clock()
    clock = StepClock(HostTimer(now))
    for size, span, gap in [(128, 0.016, 0.004), (64, 0.010, 0.002)] * 10:
        clock.start()
        now.seconds += span
        clock.stop(1, 4, size)
        now.seconds += gap
    clock.start()
    now.seconds += 0.005
    clock.stop(0, 4, 64)
    times = clock.take(1)
    assert list(times) == [(64, 4), (128, 4)]
    assert abs(times[(64, 4)] - 0.012) < 1e-9 and abs(times[(128, 4)] - 0.020) < 1e-9, times
    assert list(clock.take(0)) == [(64, 4)] and clock.take(1) == {}


def test_a_gap_longer_than_the_step_is_counted_up_to_the_step_and_a_width_without_one_takes_the_mean():
    now = Clock()
    clock = StepClock(HostTimer(now))
    for span, gap in [(0.010, 0.002), (0.010, 0.500), (0.010, 0.002)]:  # a prefill in the second gap
        clock.start()
        now.seconds += span
        clock.stop(0, 4, 8)
        now.seconds += gap
    clock.start()
    now.seconds += 0.010
    clock.stop(1, 2, 8)  # the first step of slot 1: nothing after it yet
    # gaps 2 ms, 10 ms (the 0.5 s counted up to the step's own), 2 ms: running means 2, 3.6, 3.28 ms
    assert abs(clock.take(0)[(8, 4)] - 0.01328) < 1e-9
    assert abs(clock.take(1)[(8, 2)] - 0.01328) < 1e-9  # no gap after slot 1's step yet: every gap's mean


def test_the_controller_finds_the_best_width_when_taking_in_tokens_costs_the_scheduler():
    """Steps of 1 + 1.2 w ms, and 2 ms of the scheduler's after each per token a request committed, at acceptance
    0.9: width 4 commits the most tokens per second (2: 0.97x it, 8: 0.95x). Timed as the worker's StepWidths
    times them, the slot sits at 4 and visits 8 only to time it again (8 of the last 300 steps; with one running
    mean of every gap, the narrower steps' gaps counted into 8's first intervals, and it stayed 40)."""
    table = WidthsByBatchSize.parse({1: [1, 2, 4, 8]})
    controller = WidthsByAcceptance(table, AcceptanceSettings(), log=False)
    now, requests = Clock(), 100
    clock = StepClock(HostTimer(now))
    widths = []
    for _ in range(600):
        width = controller.width(0)
        widths.append(width)
        clock.start()
        now.seconds += 0.001 + 0.0012 * width
        clock.stop(0, width, requests)
        committed = expected_committed(0.9, width)
        now.seconds += 0.002 * committed
        controller.observe(0, width, round(committed * requests), requests)
        if controller.due(0):
            controller.decide(0, clock.take(0))
    rate = {w: expected_committed(0.9, w) / (0.001 + 0.0012 * w + 0.002 * expected_committed(0.9, w)) for w in (1, 2, 4, 8)}
    assert max(rate, key=rate.get) == 4 and rate[8] < 0.96 * rate[4] < rate[2] / 0.97
    tail = widths[-300:]
    assert tail.count(4) >= 280 and tail.count(8) <= 12, {w: tail.count(w) for w in set(tail)}


def test_the_committed_h200_check_of_the_device_timer_passed_and_is_the_history_s():
    """benchmarks/step_clock_cost.py on the H200 (what a CPU cannot run): the device timer's seconds agree
    with plain events around a sleep kernel, every kept count read back right with reused buffers, no mark
    inside a graph capture; the figures of its note in benchmarks/results/HISTORY.md are the result's."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    result = json.loads((root / "benchmarks" / "results" / "step_clock_cost_h200.json").read_text())
    assert result["machine"]["gpu"] == "NVIDIA H200"
    checks = result["checks"]
    assert all(0.99 * s["plain_events_s"] <= s["timer_s"] <= s["plain_events_s"] for s in checks["spans"])
    assert checks["kept_counts_read_right"] == 1000 and checks["host_buffers_made"] <= 2
    assert checks["mark_in_capture"] == "None"
    history = " ".join((root / "benchmarks" / "results" / "HISTORY.md").read_text().split())  # lines wrapped anywhere
    assert (f"at {result['median_timer_us']:.1f} µs against {result['median_torch_defaults_us']:.1f} µs the old way "
            f"({result['saved_us_per_step']:.0f} µs less)") in history
