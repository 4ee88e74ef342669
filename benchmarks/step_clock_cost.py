"""Host cost of the acceptance controller's step clock on a GPU, and its readings checked.

Each decode step under ``widths_by_acceptance`` sets two marks (the step's
start and end) and keeps one accept count for the next step
(``sglang_spec_plugins.engine.step_times.DeviceTimer``), then reads them a
step later. This times that per step on the host, the package's timer against
the same work done with torch's defaults (``Event.record()`` asking torch for
the current device each time; a new pinned buffer and event per count: what
the timer did up to 2026-12-03), over the same small kernels; and checks on
the GPU what CPU tests cannot: the seconds between two marks against events
set the plain way around a timed sleep kernel, every kept count read back
right while buffers are reused, and no mark inside a CUDA-graph capture.

    python3 benchmarks/step_clock_cost.py --out benchmarks/results/step_clock_cost_h200.json
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import platform
import statistics
import time
from pathlib import Path

import torch

# the module alone (it imports only the standard library, and torch where it times): no install needed on the H200
_SOURCE = Path(__file__).resolve().parent.parent / "sglang_spec_plugins" / "engine" / "step_times.py"
_SPEC = importlib.util.spec_from_file_location("step_times", _SOURCE)
step_times = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(step_times)
DeviceTimer, timer_for = step_times.DeviceTimer, step_times.timer_for

STEPS = 2000
REPEATS = 7


class TorchDefaults:
    """The same marks and counts through torch's defaults (see the module doc)."""

    def mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, first, last):
        last.synchronize()
        return first.elapsed_time(last) / 1000.0

    def keep(self, count):
        host = torch.empty(count.shape, dtype=count.dtype, pin_memory=True)
        host.copy_(count, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()
        return host, copied

    @staticmethod
    def read(kept):
        host, copied = kept
        copied.synchronize()
        return int(host)


def per_step_us(timer, read, accept_lens) -> float:
    """Microseconds of host time per step: start mark, the step's count (a sum on
    the GPU), end mark, kept; the previous step's count and seconds read."""
    previous = None
    t0 = time.perf_counter()
    for _ in range(STEPS):
        if previous is not None:
            start, end, kept = previous
            read(kept)
            timer.seconds(start, end)
        start = timer.mark()
        count = accept_lens.sum()
        end = timer.mark()
        previous = (start, end, timer.keep(count))
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / STEPS * 1e6


def checks(timer: DeviceTimer) -> dict:
    found = {}
    # seconds across a sleep kernel, against events set the plain way around the same kernel
    spans = []
    for cycles in (1_000_000, 10_000_000, 50_000_000):
        plain_start, plain_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        plain_start.record()
        first = timer.mark()
        torch.cuda._sleep(cycles)
        last = timer.mark()
        plain_end.record()
        ours = timer.seconds(first, last)
        plain = plain_start.elapsed_time(plain_end) / 1000.0
        spans.append({"sleep_cycles": cycles, "timer_s": ours, "plain_events_s": plain})
        assert 0 < ours <= plain * 1.001 + 2e-6 and ours >= 0.9 * plain, spans[-1]
    found["spans"] = spans
    # kept counts: every one read right, with the buffers reused
    values = torch.randint(0, 1 << 20, (1000,), device="cuda", dtype=torch.int64)
    expected = values.tolist()
    pending, read = [], []
    for i in range(1000):
        pending.append(timer.keep(values[i:i + 1].sum()))
        if len(pending) == 2:  # two in flight at most, as a worker's steps keep them
            read.append(int(pending.pop(0)))
    read += [int(p) for p in pending]
    assert read == expected, "a kept count read back wrong"
    found["kept_counts_read_right"] = len(read)
    found["host_buffers_made"] = len(timer._free)
    assert len(timer._free) <= 2, timer._free
    # no mark inside a graph capture
    graph, marks = torch.cuda.CUDAGraph(), []
    with torch.cuda.graph(graph):
        marks.append(timer.mark())
        torch.ones(4, device="cuda").sum()
    assert marks == [None], marks
    found["mark_in_capture"] = "None"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.cuda.init()
    timer = timer_for("cuda")
    assert isinstance(timer, DeviceTimer)
    accept_lens = torch.ones(128, dtype=torch.int32, device="cuda")
    defaults = TorchDefaults()
    for _ in range(2):  # warm both: the pinned allocator, the event pool
        per_step_us(timer, int, accept_lens)
        per_step_us(defaults, defaults.read, accept_lens)
    ours, theirs = [], []
    for _ in range(REPEATS):  # interleaved, side by side
        ours.append(per_step_us(timer, int, accept_lens))
        theirs.append(per_step_us(defaults, defaults.read, accept_lens))
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"gpu": torch.cuda.get_device_name(), "cpu": platform.processor() or platform.machine(),
                    "python": platform.python_version(), "torch": torch.__version__},
        "command": "python3 benchmarks/step_clock_cost.py --out benchmarks/results/step_clock_cost_h200.json",
        "steps": STEPS, "repeats": REPEATS,
        "timer_us_per_step": ours, "torch_defaults_us_per_step": theirs,
        "median_timer_us": statistics.median(ours), "median_torch_defaults_us": statistics.median(theirs),
        "checks": checks(timer),
    }
    result["saved_us_per_step"] = result["median_torch_defaults_us"] - result["median_timer_us"]
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
