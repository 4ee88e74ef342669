"""Where a scheduler's decode steps spend their host time, from a trace SGLang's profiler wrote with Python
stacks (``engine_check.py --profile``), or from py-spy's samples of the whole run (``run.sh``'s ``PYSPY``).

    python3 tools/gpu/engine/trace_steps.py TRACE.json.gz [TRACE ...] [--depth 7] [--min-ms 0.05]
    python3 tools/gpu/engine/trace_steps.py --spy LABEL.raw [...] [--rate 200] [--depth 7] [--min-ms 0.05]

For each trace: its steps (the outermost calls of a worker's ``forward_batch_generation``: a speculative
worker's, not the target worker's it calls), the median milliseconds from one step's start to the next, the
GPU's busy milliseconds per step (the union of its kernels and copies), and the tree of Python calls under
the scheduler's event loop: each node's milliseconds per step (inclusive, summed over its calls in the window,
divided by the steps), to ``--depth`` levels, leaving out nodes under ``--min-ms``. The profiler's own cost is
in every node (a Python call costs more under it): compare engines traced alike, not against their untraced
step times.

:func:`read`, :func:`gpu_busy_us` and :func:`wait_for_trace` are how this repository's scripts read and await
SGLang's profiler traces (``engine_check.py``, ``benchmarks/e2e_speculative.py``).

py-spy's samples (``record --idle --format raw``) cost the process almost nothing and count waits too: with
``--spy`` each node is the seconds of wall time the scheduler's loop spent in it over the whole run (samples
over ``--rate``), inclusive, a function's lines merged.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

STEP = "forward_batch_generation"
LOOP = re.compile(r"event_loop_(?:overlap|normal)$")
"""The scheduler's loop function (SGLang's own name for each mode)."""


def short(name: str) -> str:
    """``.../sglang/srt/managers/scheduler.py(1234): run_batch`` as ``scheduler.py:run_batch``; a built-in's
    name without its object's address (one name for every call)."""
    found = re.match(r"(?:.*/)?([^/(]+)\(\d+\): (.+)$", name)
    return f"{found.group(1)}:{found.group(2)}" if found else re.sub(r" at 0x[0-9a-f]+", "", name)


def read(path: Path) -> List[Dict[str, Any]]:
    """The complete events (``ph`` X) of a Chrome trace, gzipped or not."""
    opener = gzip.open if Path(path).suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [e for e in json.load(f).get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]


def gpu_busy_us(events: List[Dict[str, Any]], begin: float = float("-inf"), end: float = float("inf")) -> float:
    """Microseconds the GPU was busy (the union of its kernels, copies and sets) among ``events`` that start in
    ``[begin, end)``."""
    busy, reach = 0.0, None
    for a, b in sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                       if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and begin <= e["ts"] < end):
        if reach is None or a > reach:
            busy, reach = busy + b - a, b
        elif b > reach:
            busy, reach = busy + b - reach, b
    return busy


def wait_for_trace(directory: Path, seconds: float) -> Optional[Path]:
    """The newest ``*.trace.json.gz`` SGLang's profiler writes into ``directory``, once its size has held for a
    second (it appears before the export ends); None if none came within ``seconds``."""
    deadline, last = time.time() + seconds, None
    while time.time() < deadline:
        traces = sorted(Path(directory).glob("*.trace.json.gz"))
        size = traces[-1].stat().st_size if traces else None
        if size is not None and size == last:
            return traces[-1]
        last = size
        time.sleep(1)
    return None


def summary(events: List[Dict[str, Any]]) -> Dict[str, Any]:
    """``steps``, ``step_ms`` (median start to start), ``gpu_busy_ms`` per step and ``tree``:
    ``{path (names from the loop down): milliseconds per step}``."""
    python = {e["args"]["Python id"]: e for e in events
              if e.get("cat") == "python_function" and "Python id" in e.get("args", {})}

    def parent(e):
        return python.get(e["args"].get("Python parent id"))

    def ancestors(e):
        found = []
        while (e := parent(e)) is not None:
            found.append(e)
        return found

    steps = sorted((e for e in python.values() if e["name"].endswith(": " + STEP)
                    and not any(a["name"].endswith(": " + STEP) for a in ancestors(e))), key=lambda e: e["ts"])
    if len(steps) < 3:
        return {"steps": len(steps)}
    steps = steps[1:]  # the first may have begun before the profiler did
    starts = [e["ts"] for e in steps]
    begin, end = starts[0], starts[-1]  # whole steps: from the first kept one's start to the last one's
    count = len(steps) - 1
    loops = [e for e in python.values() if LOOP.search(e["name"])]
    root = loops[0] if loops else None
    tree: Dict[Tuple[str, ...], float] = {}
    for e in python.values():
        if e["ts"] < begin or e["ts"] >= end:
            continue
        chain = [e] + ancestors(e)
        if root is not None:
            if root not in chain:
                continue
            chain = chain[:chain.index(root)]
        path = tuple(short(a["name"]) for a in reversed(chain))
        tree[path] = tree.get(path, 0.0) + e["dur"] / 1000 / count
    busy = gpu_busy_us(events, begin, end)
    return {"steps": count, "step_ms": round(statistics.median(b - a for a, b in zip(starts, starts[1:])) / 1000, 3),
            "gpu_busy_ms": round(busy / 1000 / count, 3), "root": short(root["name"]) if root else None, "tree": tree}


def spy_tree(path: Path, rate: float) -> Dict[Tuple[str, ...], float]:
    """``{path (frames from the scheduler's event loop down): seconds}`` of py-spy's raw samples (each line
    ``frame;frame;... count``, a frame ``function (file:line)``), at ``rate`` samples a second."""
    tree: Dict[Tuple[str, ...], float] = {}
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            frames = stack.split(";")
            loop = next((i for i, frame in enumerate(frames) if re.match(r"\S*event_loop_(?:overlap|normal) ", frame)), None)
            if loop is None:
                continue
            names = []
            for frame in frames[loop + 1:]:
                found = re.match(r"(?:\S+\.)?(\w+|<\w+>) \((?:.*/)?([^/:]+):\d+\)$", frame)
                names.append(f"{found.group(2)}:{found.group(1)}" if found else frame)
            for end in range(1, len(names) + 1):
                key = tuple(names[:end])
                tree[key] = tree.get(key, 0.0) + int(count) / rate
    return tree


def render(tree: Dict[Tuple[str, ...], float], depth: int, min_ms: float) -> List[str]:
    """The tree as indented lines, each level's nodes by time, largest first."""
    lines: List[str] = []

    def walk(prefix: Tuple[str, ...]):
        children = sorted((p for p in tree if len(p) == len(prefix) + 1 and p[:len(prefix)] == prefix
                           and tree[p] >= min_ms), key=lambda p: -tree[p])
        for p in children:
            lines.append(f"{'  ' * len(prefix)}{tree[p]:8.3f}  {p[-1]}")
            if len(p) < depth:
                walk(p)

    walk(())
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", type=Path, nargs="+")
    parser.add_argument("--spy", action="store_true", help="the files are py-spy's raw samples")
    parser.add_argument("--rate", type=float, default=200, help="py-spy's samples a second")
    parser.add_argument("--depth", type=int, default=7)
    parser.add_argument("--min-ms", type=float, default=0.05)
    args = parser.parse_args()
    for path in args.traces:
        if args.spy:
            tree = spy_tree(path, args.rate)
            print(f"== {path.name}: seconds of the scheduler loop's wall time")
            print("\n".join(render(tree, args.depth, args.min_ms)))
            continue
        found = summary(read(path))
        print(f"== {path.name}: {found['steps']} steps"
              + (f", {found['step_ms']} ms a step, GPU busy {found['gpu_busy_ms']} ms a step, under {found['root']}"
                 if "step_ms" in found else ""))
        print("\n".join(render(found.get("tree", {}), args.depth, args.min_ms)))


if __name__ == "__main__":
    main()
