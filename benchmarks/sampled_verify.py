"""What a sampled verify costs on a GPU: the worker bases' acceptance against native DFLASH's, side by side.

For ``bs`` chains of ``W`` tokens (temperature 0.7, top-p 0.9, no top-k: the
sampled requests of the engine benchmarks) over a vocabulary of ``V``, per call:

- ``plugin``: :class:`~sglang_spec_plugins.engine.chain_verify.ChainVerifier`,
  what every worker base commits with, renormalising with the release's fused
  kernels (``sglang.srt.layers.sampler``'s ``top_p_renorm_prob``);
- ``plugin_torch``: the same verifier with the torch renormalisations (a sort
  of every row), what the bases ran on a GPU before;
- ``native``: SGLang's ``compute_dflash_sampling_correct_drafts_and_bonus``,
  native DFLASH's sampled verify (thresholds 1: exact).

``host_us``: the Python side of a call, the GPU left running behind;
``wall_us``: per call with the queue drained at the end (the larger of host
and GPU). Medians of interleaved repeats. Also checked: the kernels' target
distribution against the torch one's, row by row.

    python3 benchmarks/sampled_verify.py --out benchmarks/results/sampled_verify_h100.json
    python3 benchmarks/sampled_verify.py --table benchmarks/results/sampled_verify_h100.json
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import platform
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

CALLS = 100
REPEATS = 5
WIDTH = 16
BATCHES = (1, 8, 32, 64)
VOCABS = (4096, 128256)  # the model trained here (tools/gpu/train); Llama 3
TEMPERATURE, TOP_P = 0.7, 0.9


def verifier(kernels: bool):
    """A ChainVerifier as a worker base builds it (flashinfer sampler), with or without the release's kernels."""
    from sglang_spec_plugins.engine.chain_verify import ChainVerifier
    from sglang_spec_plugins.engine.worker_contract import contract

    sampler = importlib.import_module("sglang.srt.layers.sampler")
    bound = sampler.top_k_renorm_prob, sampler.top_p_renorm_prob
    if not kernels:
        sampler.top_k_renorm_prob = sampler.top_p_renorm_prob = None
    try:
        return ChainVerifier(contract(), "flashinfer")
    finally:
        sampler.top_k_renorm_prob, sampler.top_p_renorm_prob = bound


def case(bs: int, vocab: int):
    """``(batch, logits_output, chains)``: sampled requests as SGLang's sampling_info holds them,
    random logits, and chains whose drafts are each position's most likely token (often accepted)."""
    import torch
    from sglang.srt.sampling.sampling_params import TOP_K_ALL, SamplingParams

    generator = torch.Generator(device="cuda").manual_seed(bs * vocab)
    logits = torch.randn((bs * WIDTH, vocab), device="cuda", generator=generator) * 3
    chains = torch.zeros((bs, WIDTH), dtype=torch.int64, device="cuda")
    chains[:, 1:] = logits.argmax(dim=-1).view(bs, WIDTH)[:, :-1]
    info = SimpleNamespace(temperatures=torch.full((bs, 1), TEMPERATURE, device="cuda"),
                           top_ks=torch.full((bs,), TOP_K_ALL, dtype=torch.int32, device="cuda"),
                           top_ps=torch.full((bs,), TOP_P, device="cuda"),
                           min_ps=torch.zeros((bs,), device="cuda"), need_min_p_sampling=False,
                           need_top_k_sampling=False, need_top_p_sampling=True, is_all_greedy=False,
                           logit_bias=None)
    request = SimpleNamespace(sampling_params=SamplingParams(temperature=TEMPERATURE, top_p=TOP_P))
    batch = SimpleNamespace(reqs=[request] * bs, sampling_info=info, return_logprob=False)
    return batch, SimpleNamespace(next_token_logits=logits), chains


def per_call_us(run) -> tuple:
    """``(host_us, wall_us)`` per call over :data:`CALLS` calls."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        run()
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return host / CALLS * 1e6, wall / CALLS * 1e6


def distribution_check(batch, output) -> dict:
    """The kernels' target distribution against the torch renormalisation's, over every row."""
    from sglang_spec_plugins.engine.chain_sampling import target_probs

    sampler = importlib.import_module("sglang.srt.layers.sampler")
    info = batch.sampling_info
    rows = output.next_token_logits.shape[0]
    temperatures = info.temperatures.repeat_interleave(WIDTH, dim=0)
    top_ps = info.top_ps.repeat_interleave(WIDTH, dim=0)
    fused = target_probs(output.next_token_logits, temperatures, None, top_ps, None,
                         (sampler.top_k_renorm_prob, sampler.top_p_renorm_prob))
    plain = target_probs(output.next_token_logits, temperatures, None, top_ps, None)
    kept_apart = ((fused > 0) != (plain > 0)).any(dim=-1)
    return {"rows": rows, "max_abs_difference": float((fused - plain).abs().max()),
            "rows_keeping_other_tokens": int(kept_apart.sum())}


def table(result: dict) -> str:
    """The results as a markdown table: each engine's wall and host microseconds per call, and the ratios."""
    lines = ["| vocabulary | batch | plugin: wall / host µs | plugin, torch renormalising | native DFLASH | "
             "plugin ÷ native (wall) | kernels against torch: rows keeping other tokens, largest gap |",
             "|---|---|---|---|---|---|---|"]
    for cell in result["cells"]:
        ours, torch_only, native, check = cell["plugin"], cell["plugin_torch"], cell["native"], cell["check"]
        lines.append(f"| {cell['vocab']:,} | {cell['batch']} | {ours['wall_us']:.0f} / {ours['host_us']:.0f} | "
                     f"{torch_only['wall_us']:.0f} / {torch_only['host_us']:.0f} | "
                     f"{native['wall_us']:.0f} / {native['host_us']:.0f} | {ours['wall_us'] / native['wall_us']:.2f} | "
                     f"{check['rows_keeping_other_tokens']} of {check['rows']}, {check['max_abs_difference']:.1e} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--table", type=Path, help="print the table of a results file and stop")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    import sglang
    import torch
    from sglang.srt.speculative.dflash_utils import compute_dflash_sampling_correct_drafts_and_bonus

    engines = {"plugin": verifier(True), "plugin_torch": verifier(False)}
    cells = []
    for vocab in VOCABS:
        for bs in BATCHES:
            batch, output, chains = case(bs, vocab)
            runs = {name: (lambda v=v: v(batch, output, chains)) for name, v in engines.items()}
            runs["native"] = lambda: compute_dflash_sampling_correct_drafts_and_bonus(
                candidates=chains, next_token_logits=output.next_token_logits, sampling_info=batch.sampling_info,
                threshold_single=1.0, threshold_acc=1.0)
            for run in runs.values():  # warm: the kernels' first launches, the caching allocator
                for _ in range(10):
                    run()
            timed = {name: [] for name in runs}
            for _ in range(REPEATS):  # interleaved
                for name, run in runs.items():
                    timed[name].append(per_call_us(run))
            cell = {"vocab": vocab, "batch": bs, "width": WIDTH, "check": distribution_check(batch, output)}
            for name, values in timed.items():
                cell[name] = {"host_us": statistics.median(v[0] for v in values),
                              "wall_us": statistics.median(v[1] for v in values)}
            cells.append(cell)
            print(json.dumps(cell), flush=True)
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"gpu": torch.cuda.get_device_name(0), "cpu": platform.processor() or platform.machine(),
                    "python": platform.python_version(), "torch": torch.__version__, "sglang": sglang.__version__},
        "command": f"python3 benchmarks/sampled_verify.py --out {args.out}",
        "calls": CALLS, "repeats": REPEATS, "temperature": TEMPERATURE, "top_p": TOP_P, "cells": cells,
    }
    print(table(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
