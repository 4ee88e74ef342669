"""Verify widths by batch size on an H200: adaptive against the best static width and against 16.

Run on the GPU machine as ``gpu_layer_step.py`` is run (one SGLang release's
``.py`` source first on ``PYTHONPATH``; see benchmarks/METHODS.md):

    python3 benchmarks/adaptive_width.py --out $OUT/adaptive_0.5.23.json

or anywhere, without a GPU, on a synthetic step-time model (exercises every
step but the timing; the numbers mean nothing):

    python3 benchmarks/adaptive_width.py --dry-run

A verify step is ``--layers`` Llama-3-8B-shaped decoder layers (hidden 4096,
32/8 heads of 128, MLP 14336, bf16; ``gpu_layer_step.Layer``) and the LM head
(vocabulary 128256) over every verified token, attention through SGLang's own
trtllm_mha backend (SM90: flashinfer's XQA kernel) at ndt 16 with this
package's patches applied, each batch size captured in a CUDA graph the way
SGLang's decode graph runner captures it (``gpu_layer_step.Bench``).

1. **Grid**: for each batch size of ``--batches`` and each width of
   ``--widths``, one backend per width (its graphs captured for every batch
   size at that width: what a static width serves), the median step time.
2. **Buckets**: per acceptance ``a`` of ``--acceptance``, a chain of width
   ``w`` yields ``(1 - a**w) / (1 - a)`` accepted tokens per request and step
   (the expected accepted prefix plus the bonus token); per batch size the
   width with the most accepted tokens per second becomes that size's bucket,
   as an operator would write ``widths_by_batch_size`` from this grid.
3. **Serving**: one backend whose graph for each batch size is captured at
   its bucket's width (``sglang_spec_plugins.patches.widths_by_batch_size`` does
   this in SGLang's runner), then ``--sequence`` (batch sizes that grow and
   shrink, sizes between captured ones padded the way SGLang pads them),
   ``--steps`` steps each, each step's width from the package's
   ``WidthSchedule`` (what a worker asks), new random sequence lengths every
   step; the whole sequence timed with CUDA events. Each static width serves
   the same sequence on its own graphs. Accepted tokens count only the real
   requests of a padded batch. At the first switch to each (size, width)
   the adaptive step's output is compared with a float32 reference
   (relative error, ``step_errors``); the control is the same comparison on
   each static width's graph of every size, after its timing.

Reported: per acceptance, accepted tokens per second per batch size and
over the sequence (each phase of the sequence serving the same number of
accepted tokens, so a faster width ends its phase sooner: the harmonic mean
of the phases' rates), adaptive against static 16 and against the best static width
(the single width that does best over the sequence; and, per batch size,
the best width at that size); the memory each configuration reserved
(its graphs' pools and the backend's buffers, measured with the allocator's
cache emptied before and after; configurations with the same buckets share
one capture).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglang_spec_plugins.widths_by_batch_size import WidthsByBatchSize, WidthSchedule, padded_size  # noqa: E402

BATCHES = (1, 8, 32, 64, 128)
WIDTHS = (2, 4, 8, 16)
ACCEPTANCE = (0.6, 0.7, 0.8, 0.9)
SEQUENCE = (1, 5, 8, 24, 32, 50, 64, 128, 100, 64, 30, 8, 3, 1)
CONTEXT = 1024
VOCAB = 128256


def accepted_per_request(width: int, acceptance: float) -> float:
    """Expected tokens a request gains from a chain of ``width`` verified tokens
    when each draft token is accepted with probability ``acceptance``."""
    return (1 - acceptance**width) / (1 - acceptance)


def buckets_from_grid(grid: Dict[int, Dict[int, float]], acceptance: float) -> WidthsByBatchSize:
    """Per batch size, the width with the most accepted tokens per second."""
    best = {bs: max(row, key=lambda w: bs * accepted_per_request(w, acceptance) / row[w]) for bs, row in grid.items()}
    sizes = sorted(best)
    return WidthsByBatchSize.parse({1 if i == 0 else bs: best[bs] for i, bs in enumerate(sizes)})


def plan_sequence(sequence: Sequence[int], steps: int, capture: Sequence[int], width_of: Callable[[int], int]):
    """Each step: (raw batch size, the captured size it replays, its width)."""
    out = []
    for raw in sequence:
        for _ in range(steps):
            width = width_of(raw)
            out.append((raw, padded_size(raw, capture), width))
    return out


def summarize(grid, served, acceptance: Sequence[float], sequence, steps) -> dict:
    """Accepted tokens per second per configuration, over the sequence and per raw batch size."""
    report = {}
    for a in acceptance:
        rows = {}
        for name, steps_run in served.items():
            if name.startswith("adaptive") and name != f"adaptive@{a}":
                continue
            phases = [steps_run[i:i + steps] for i in range(0, len(steps_run), steps)]
            rates = [sum(r * accepted_per_request(w, a) for r, _, w, _ in p) / (sum(ms for *_, ms in p) / 1e3)
                     for p in phases]
            per_size = {raw: sum(r for r, p in zip(rates, phases) if p[0][0] == raw) / sequence.count(raw)
                        for raw in sorted(set(sequence))}
            # Each phase serves the same number of accepted tokens: a faster width ends its phase sooner.
            rows["adaptive" if name.startswith("adaptive") else name] = {
                "tokens_per_s": len(rates) / sum(1 / r for r in rates), "per_batch_size": per_size}
        statics = {k: v for k, v in rows.items() if k != "adaptive"}
        best_static = max(statics, key=lambda k: statics[k]["tokens_per_s"])
        ada = rows["adaptive"]
        report[str(a)] = {
            "rows": rows,
            "best_static": best_static,
            "adaptive_vs_static16": ada["tokens_per_s"] / rows["static16"]["tokens_per_s"] if "static16" in rows else None,
            "adaptive_vs_best_static": ada["tokens_per_s"] / statics[best_static]["tokens_per_s"],
            "per_batch_size_vs_static16": {bs: ada["per_batch_size"][bs] / rows["static16"]["per_batch_size"][bs]
                                           for bs in ada["per_batch_size"]} if "static16" in rows else None,
            "per_batch_size_vs_best_width_there": {
                bs: ada["per_batch_size"][bs] / max(v["per_batch_size"][bs] for v in statics.values())
                for bs in ada["per_batch_size"]},
        }
    return report


def table(report) -> str:
    lines = []
    for a, r in report.items():
        lines.append(f"acceptance {a}: adaptive {r['rows']['adaptive']['tokens_per_s']:.0f} tok/s; "
                     f"x{r['adaptive_vs_static16']:.2f} static 16, x{r['adaptive_vs_best_static']:.2f} best static "
                     f"({r['best_static']})")
        sizes = list(r["per_batch_size_vs_best_width_there"])
        lines.append("  batch size          " + " ".join(f"{s:>6}" for s in sizes))
        lines.append("  vs static 16        " + " ".join(f"{r['per_batch_size_vs_static16'][s]:6.2f}" for s in sizes))
        lines.append("  vs best width there " + " ".join(f"{r['per_batch_size_vs_best_width_there'][s]:6.2f}" for s in sizes))
    return "\n".join(lines)


# -- timing: a synthetic model (dry run) or the GPU -------------------------------------------------


class Synthetic:
    """Step time in ms = launch floor + per-token cost: a stand-in with the
    shape of the measured tables, so that a dry run exercises everything else."""

    def configuration(self, widths_by_size: Dict[int, int]):
        return lambda raw, size, width: 0.2 + 0.004 * (size or raw) * width + 0.0004 * (size or raw) * CONTEXT / 64

    def memory_mb(self, name):
        return 0.0


class Gpu:
    """Graphs through SGLang's trtllm_mha (``gpu_layer_step.Bench``), one backend per configuration."""

    def __init__(self, args):
        import contextlib

        import pytest
        import torch

        spec = importlib.util.spec_from_file_location("gpu_layer_step", Path(__file__).with_name("gpu_layer_step.py"))
        self.g = g = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(g)
        sys.meta_path.append(g._AbsentKernels())
        import sglang

        from sglang_spec_plugins.engine.probe import installed_version
        from sglang_spec_plugins.patches import PATCHES, apply_all
        from sglang_spec_plugins.testing import trtllm as harness

        self.release = getattr(sglang, "__version__", None) or installed_version()
        apply_all(PATCHES, self.release)
        self.harness, self.args, self.torch = harness, args, torch
        self.gen = torch.Generator(device="cuda").manual_seed(0)
        self.rng = torch.Generator().manual_seed(1)
        self.layer = Stack(g.Layer(self.gen), args.layers, torch)
        self.max_bs, self.max_context = max(args.batches), CONTEXT + 64
        self.memory: Dict[str, float] = {}
        self.errors: List[dict] = []
        self._configs: Dict[tuple, Callable] = {}
        self._published = contextlib.ExitStack()  # one published configuration (ndt 16, trtllm_mha) for the run
        g._ARGS.append(self._published.enter_context(
            harness._published(self._published.enter_context(pytest.MonkeyPatch.context()), g.NDT, self.max_bs,
                               "trtllm_mha")))

    def configuration(self, widths_by_size: Dict[int, int], name: str = ""):
        """Capture one graph per size at its width on a fresh backend (once per
        distinct mapping); return step(raw, size, width) -> ms."""
        key = tuple(sorted(widths_by_size.items()))
        if key not in self._configs:
            self._configs[key] = self._capture(widths_by_size, name)
        return self._configs[key]

    def _capture(self, widths_by_size: Dict[int, int], name: str):
        torch, g = self.torch, self.g
        bench = g.Bench("trtllm_mha", g.NDT, self.layer, self.max_bs, self.max_context, self.gen)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # what earlier configurations freed is given back: not counted, not reused
        reserved_before = torch.cuda.memory_reserved()
        graphs = {size: bench.capture(size, width, [CONTEXT] * size) for size, width in sorted(widths_by_size.items(), reverse=True)}
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        self.memory[name] = (torch.cuda.memory_reserved() - reserved_before) / 2**20
        previous, checked = [None], set()

        def step(raw, size, width, check=False):
            graph, fb, x, (out, _) = graphs[size]
            assert widths_by_size[size] == width, (size, width, widths_by_size)
            lens = torch.randint(CONTEXT // 2, CONTEXT, (size,), generator=self.rng).tolist()
            bench.refill(fb, lens, width)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            bench.step(graph, fb)
            end.record()
            end.synchronize()
            if check or (previous[0] not in (None, width) and (size, width) not in checked):  # first switch to it
                checked.add((size, width))
                ref, _ = bench.reference(x, fb, width)
                self.errors.append({"config": name, "bs": size, "width": width, "rel_err": g.rel_err(out, ref)})
            previous[0] = width
            return start.elapsed_time(end)

        return step

    def grid(self, batches, widths):
        out: Dict[int, Dict[int, float]] = {bs: {} for bs in batches}
        steps = {}
        for w in widths:
            step = steps[w] = self.configuration({bs: w for bs in batches}, f"static{w}")
            for bs in batches:
                times = sorted(step(bs, bs, w) for _ in range(self.args.iters))
                out[bs][w] = times[len(times) // 2]
                step(bs, bs, w, check=True)  # the static width's error at this size: the control of the switches'
        return out, steps


class Stack:
    """``layers`` applications of one decoder layer, then the LM head over every token
    (timing); the reference (``dtype`` given) skips the LM head."""

    def __init__(self, layer, layers: int, torch):
        self.layer, self.layers = layer, layers
        self.head = (torch.randn(layer.qkv.shape[0], VOCAB, device="cuda") / layer.qkv.shape[0] ** 0.5).to(torch.bfloat16)

    def forward(self, x, attention, dtype=None):
        attn = None
        for _ in range(self.layers):
            x, attn = self.layer.forward(x, attention, dtype)
        if dtype is None:
            self.logits = x @ self.head
        return x, attn


def run(args) -> dict:
    started = time.time()
    backend = Synthetic() if args.dry_run else Gpu(args)
    batches, widths = tuple(args.batches), tuple(args.widths)
    if args.dry_run:
        grid = {bs: {w: backend.configuration({})(bs, bs, w) for w in widths} for bs in batches}
        static_steps = {w: backend.configuration({}) for w in widths}
    else:
        grid, static_steps = backend.grid(batches, widths)
    served = {}
    for w in widths:
        served[f"static{w}"] = [(raw, size, w, static_steps[w](raw, size, w))
                                for raw, size, w in plan_sequence(args.sequence, args.steps, batches, lambda raw: w)]
    buckets = {}
    for a in args.acceptance:
        b = buckets[a] = buckets_from_grid(grid, a)
        by_size = {bs: b.at(bs) for bs in batches}
        step = backend.configuration(by_size) if args.dry_run else backend.configuration(by_size, f"adaptive@{a}")
        schedule = WidthSchedule(b, batches, hold_steps=args.hold_steps)
        served[f"adaptive@{a}"] = [(raw, size, w, step(raw, size, w))
                                   for raw, size, w in plan_sequence(args.sequence, args.steps, batches, schedule.width)]
    report = summarize(grid, served, args.acceptance, args.sequence, args.steps)
    result = {
        "dry_run": args.dry_run, "date": time.strftime("%Y-%m-%d"), "layers": args.layers, "context": CONTEXT,
        "batches": batches, "widths": widths, "hold_steps": args.hold_steps, "sequence": list(args.sequence), "steps_per_size": args.steps,
        "grid_step_ms": {str(bs): {str(w): ms for w, ms in row.items()} for bs, row in grid.items()},
        "buckets": {str(a): b.as_plain() for a, b in buckets.items()},
        "report": report, "wall_s": None,
    }
    if not args.dry_run:
        import torch

        result.update(release=backend.release, device=torch.cuda.get_device_name(), torch=torch.__version__,
                      graph_memory_mb=backend.memory, step_errors=backend.errors,
                      stood_in=sorted(set(backend.g.STOOD_IN)))
    result["wall_s"] = round(time.time() - started, 1)
    return result


def markdown(result: dict) -> str:
    """A result's tables (benchmarks/results/HISTORY.md holds the committed one's): the step-time grid, then per
    acceptance the adaptive buckets against static widths."""
    widths = [str(w) for w in result["widths"]]
    lines = ["| batch | " + " | ".join(f"width {w}" for w in widths) + " |", "|---" * (len(widths) + 1) + "|"]
    for bs, row in result["grid_step_ms"].items():
        lines.append(f"| {bs} | " + " | ".join(f"{row[w]:.2f}" for w in widths) + " |")
    lines += ["", "| acceptance | adaptive tok/s | vs static 16 | best static | vs best static | batch 64 vs static 16 "
              "| worst batch size vs best width there |", "|---|---|---|---|---|---|---|"]
    for a, r in result["report"].items():
        adaptive = next(v for k, v in r["rows"].items() if k.startswith("adaptive"))
        lines.append(f"| {a} | {adaptive['tokens_per_s']:.0f} | {r['adaptive_vs_static16']:.2f} | {r['best_static']} | "
                     f"{r['adaptive_vs_best_static']:.2f} | {r['per_batch_size_vs_static16']['64']:.2f} | "
                     f"{min(r['per_batch_size_vs_best_width_there'].values()):.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="no GPU: a synthetic step-time model")
    parser.add_argument("--markdown", type=Path, metavar="RESULT", help="print a committed result's tables and exit")
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    parser.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS))
    parser.add_argument("--acceptance", type=float, nargs="+", default=list(ACCEPTANCE))
    parser.add_argument("--sequence", type=int, nargs="+", default=list(SEQUENCE))
    parser.add_argument("--steps", type=int, default=10, help="steps per batch size of the sequence")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--hold-steps", type=int, default=0, help="the schedule's hysteresis (widths_by_batch_size.WidthSchedule)")
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0
    if max(args.sequence) > max(args.batches):
        parser.error("every batch size of --sequence must fit the largest of --batches (SGLang runs larger ones eagerly)")
    result = run(args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    print(table(result["report"]))
    if not args.dry_run:
        print("memory reserved per configuration (MB):", {k: round(v) for k, v in result["graph_memory_mb"].items()})
        for kind in ("static", "adaptive"):
            errs = [e["rel_err"] for e in result["step_errors"] if e["config"].startswith(kind)]
            print(f"relative error against float32, {kind} steps: {len(errs)} checked, largest {max(errs, default=0):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
