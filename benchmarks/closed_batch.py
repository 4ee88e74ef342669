"""Why the acceptance controller picks width 8 in cells where static width 4 ends the batch sooner.

A cell of ``e2e_speculative.py`` is a closed batch: ``batch`` requests of 128 new tokens start together and
the cell's tokens/s is their tokens over the time the last of them needs. The controller maximises the steady
rate instead: committed tokens per second of the steps it runs. The two differ by the drain: a wider width
commits more per step but with a wider spread (each draft kept with probability ``alpha``, a step of width
``w`` commits ``1 + min(kept run, w - 1)``), so the unluckiest request of a batch needs relatively more
steps beyond the mean at width 8 than at 4, and the tail steps cost nearly a full step each.

This replays that model (the CONTROLLED_ACCEPTANCE drafter's own draws: independent keeps at ``alpha``) with
the per-step times the controller itself logged on the H200 (``results/e2e_speculative_h200_gapfix_ndt8_logs.tar.xz``,
the ``ms per step`` of each slot's width in its INFO lines, median per slot and width: those logs' format, from
before the controller kept its times per graph size), a step of ``b`` live
requests costing ``t_w * (fixed + (1 - fixed) * b / batch)`` for a few shares ``fixed`` of a step that does
not shrink with the batch; and prints, per cell where the controller chose 8 and static 4 was faster end to
end, the steady rate and the closed batch's time at each width, beside the engines' measured tokens/s.

    python3 benchmarks/closed_batch.py --out benchmarks/results/closed_batch.json
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import statistics
import tarfile
from pathlib import Path
from typing import Dict, List, Tuple

RESULTS = Path(__file__).resolve().parent / "results"
LOGS = RESULTS / "e2e_speculative_h200_gapfix_ndt8_logs.tar.xz"
ENGINES = RESULTS / "e2e_speculative_h200_gapfix_ndt8.jsonl"
CELLS = ((32, 0.7), (64, 0.7), (128, 0.9))
"""(batch, acceptance) of the cells where the controller ran width 8 and static 4 was faster end to end."""
NEW_TOKENS = 128
FIXED_SHARES = (0.3, 0.5, 0.8)
SEEDS = 50

_SLOT = re.compile(r"(\d+)\+ requests: width (\d+) of \[[^\]]*\] \(committed [\d.]+ per request, acceptance [\d.]+, "
                   r"([\d.]+) ms per step\)")


def logged_step_ms(log: str) -> Dict[Tuple[int, int], float]:
    """``{(slot bound, width): median ms per step}`` of the controller's INFO lines (each slot's own width)."""
    seen: Dict[Tuple[int, int], List[float]] = {}
    for bound, width, ms in _SLOT.findall(log):
        seen.setdefault((int(bound), int(width)), []).append(float(ms))
    return {key: statistics.median(values) for key, values in seen.items()}


def committed(rng: random.Random, width: int, alpha: float) -> int:
    """Tokens a request commits in one step of ``width``: the bonus token and the run of kept drafts."""
    c = 1
    while c < width and rng.random() < alpha:
        c += 1
    return c


def closed_batch(width: int, alpha: float, batch: int, step_s: float, fixed: float, seed: int) -> Dict[str, float]:
    """One closed batch at a static width: its seconds, scheduler steps, and request steps per request."""
    rng = random.Random(seed)
    left = [NEW_TOKENS - 1] * batch  # the prefill gives each request its first token
    seconds, steps, request_steps = 0.0, 0, 0
    while True:
        live = [i for i, n in enumerate(left) if n > 0]
        if not live:
            break
        seconds += step_s * (fixed + (1 - fixed) * len(live) / batch)
        steps += 1
        for i in live:
            left[i] -= min(committed(rng, width, alpha), left[i])
            request_steps += 1
    return {"seconds": seconds, "steps": steps, "mean_steps": request_steps / batch}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tarfile.open(LOGS) as tar:
        log = tar.extractfile("logs/controller_ndt8.log").read().decode()
    step_ms = logged_step_ms(log)
    engines = {r["label"]: {(c["batch"], c["acceptance"]): c["tokens_per_s"] for c in r["cells"]}
               for r in map(json.loads, io.StringIO(ENGINES.read_text())) if r.get("ok")}
    rows = []
    for batch, alpha in CELLS:
        slot = max(bound for bound, _ in step_ms if bound <= batch)
        times = {w: step_ms[(slot, w)] / 1e3 for w in (4, 8)}
        row = {"batch": batch, "acceptance": alpha, "slot": slot, "step_ms": {w: t * 1e3 for w, t in times.items()},
               "measured_static4_over_static8": engines["static4_ndt8"][(batch, alpha)] / engines["static8_ndt8"][(batch, alpha)],
               "by_fixed_share": {}}
        for fixed in FIXED_SHARES:
            runs = {w: [closed_batch(w, alpha, batch, times[w], fixed, seed) for seed in range(SEEDS)] for w in (4, 8)}
            mean = {w: {k: statistics.mean(r[k] for r in runs[w]) for k in runs[w][0]} for w in (4, 8)}
            steady = {w: (NEW_TOKENS - 1) / mean[w]["mean_steps"] / times[w] for w in (4, 8)}  # tokens/s a request
            row["by_fixed_share"][str(fixed)] = {
                "steady_rate_8_over_4": steady[8] / steady[4],
                "closed_batch_seconds_8_over_4": mean[8]["seconds"] / mean[4]["seconds"],
                "steps": {w: mean[w]["steps"] for w in (4, 8)}, "mean_steps": {w: mean[w]["mean_steps"] for w in (4, 8)}}
        rows.append(row)
    result = {"command": "python3 benchmarks/closed_batch.py --out benchmarks/results/closed_batch.json",
              "logs": LOGS.name, "engines": ENGINES.name, "seeds": SEEDS, "new_tokens": NEW_TOKENS, "cells": rows}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
