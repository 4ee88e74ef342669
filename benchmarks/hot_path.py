"""Host cost on the serving path: what the patches add to a TARGET_VERIFY step.

One process, real SGLang source (the release installed, 0.5.23 in the dev
environment), the example SBD plugin loaded through SGLang's own
``load_plugins()`` (width 2 at ndt 4, maximum 8). The real ``TRTLLMHAAttnBackend``
is built on the CPU harness (``sglang_spec_plugins.testing.trtllm``, platform
reporting SM90 so the XQA path and its mask wrapper are taken) and driven
through a TARGET_VERIFY step in each phase the runners use: eager
(``init_forward_metadata`` + a layer forward), CUDA-graph capture and replay
(the backend's own out-of-graph / in-graph metadata + a layer forward), at the
plugin width (2) and at ndt (4).

Every function a patch replaced is recorded as the step calls it (arguments
and all). Each recorded call is then timed on its identical inputs:

* ``full``: the installed (patched) function against the original it replaced;
  both run the real SGLang host code. Its Triton kernels are made to launch
  nothing while timing (``no_kernels``): on a CPU they run in Triton's
  interpreter for hundreds of microseconds, on a GPU a launch is asynchronous;
  the XQA call's kernel stand-in likewise returns at once.
* ``own work`` (wrappers only): the same patch's wrapper built around a stub
  that has the original's signature and returns at once, against the stub
  alone: the wrapper's own work on the same real arguments, without the
  interpreter. This is the number the 1 µs target is about.

Also the width query (``get_num_tokens_per_req_for_target_verify``) of the
plugin algorithm against a stock ``CustomSpecAlgo`` and the built-in EAGLE.
Start-up is ``benchmarks/startup.py``.

    .venv/bin/python benchmarks/hot_path.py --out benchmarks/results/hot_path.json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import timeit
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported: SGLang's kernels run on the CPU

ROOT = Path(__file__).resolve().parent.parent
NDT, PLUGIN_WIDTH, MAX_WIDTH, BS, PAGE = 4, 2, 8, 8, 16
PREFIXES = [5, 37, 18, 60, 3, 41, 22, 90]
SBD_TOML = f"""[plugins]
enable = ["sbd"]
[algorithms.SBD]
max_tokens_per_req = {MAX_WIDTH}
verify_width = {PLUGIN_WIDTH}
"""


def per_call_ns(fn, budget_s: float = 0.01, repeat: int = 31) -> float:
    """Best of ``repeat`` short loops (each about ``budget_s``): on a shared
    machine the best short loop is the one no other process interrupted."""
    fn()
    started = time.perf_counter()
    fn()
    once = max(time.perf_counter() - started, 1e-8)
    number = max(1, min(200_000, int(budget_s / once)))
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def stub_like(original):
    """A function with ``original``'s signature (through ``__wrapped__``) that does nothing."""

    @functools.wraps(original)
    def stub(self, *args, **kwargs):
        return None

    return stub


def record_step(h, attn, fb, batch, targets, phase):
    """Run one TARGET_VERIFY step of ``phase`` ("eager", "capture", "replay")
    and return [(target key, self, args, kwargs)] for every call of a patched
    function. A replay runs the metadata functions only: the layer forward is
    inside the captured graph, no Python runs for it."""
    import pytest

    calls = []
    with pytest.MonkeyPatch.context() as mp:
        for key, (owner, attr) in targets.items():
            installed = vars(owner)[attr]

            def recorder(self, *args, _key=key, _installed=installed, **kwargs):
                calls.append((_key, self, args, kwargs))
                return _installed(self, *args, **kwargs)

            mp.setattr(owner, attr, recorder)
        h.init_metadata(attn, fb, phase)
        if phase != "replay":
            h.forward(attn, fb, batch)
    return calls


@contextlib.contextmanager
def no_kernels(h):
    """Every Triton kernel an SGLang module holds launches nothing, and the
    flashinfer decode stand-in returns at once: a ``full`` timing is then
    SGLang's own host code (on a GPU a launch is asynchronous; on this CPU the
    Triton interpreter would run the kernel for hundreds of microseconds)."""
    import pytest
    import torch
    from triton.runtime.jit import KernelInterface

    class NoLaunch:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    def no_decode(query, out=None, **kwargs):
        return out if out is not None else torch.empty_like(query)

    with pytest.MonkeyPatch.context() as mp:
        for name, module in list(sys.modules.items()):
            if name.startswith("sglang.") and module is not None:
                for attr, value in list(vars(module).items()):
                    if isinstance(value, KernelInterface):
                        mp.setattr(module, attr, NoLaunch())
        mp.setattr(h._module(h.TRTLLM).flashinfer.decode, "trtllm_batch_decode_with_kv_cache", no_decode)
        yield


def backend_costs(algorithms):
    """{row label: costs} for each patched function a TARGET_VERIFY step calls."""
    import pytest
    import torch

    from sglang_spec_plugins.loader import load
    from sglang_spec_plugins.patches import PATCHES
    from sglang_spec_plugins.patches.unit import WrapPatch
    from sglang_spec_plugins.testing import trtllm as h

    report = load()
    applied = [p for p in PATCHES if p.name in report.patches and report.patches[p.name].verdict == "apply"]
    rows, reached = {}, defaultdict(set)
    with pytest.MonkeyPatch.context() as mp:
        with h.backend(mp, NDT, PAGE, BS, sm90=True, graph_width=MAX_WIDTH) as attn:
            # Installed now (the backend module is imported): (owner, attr) -> (patch, original) per target.
            installed = {}
            for patch in applied:
                for owner, attr, original, _ in patch._originals:
                    installed[f"{owner.__name__}.{attr}"] = (owner, attr, patch, original)
            targets = {k: (o, a) for k, (o, a, _, _) in installed.items()}
            for width in (PLUGIN_WIDTH, NDT):
                for label, algo in algorithms.items():
                    if width != NDT and label != "plugin":
                        continue  # a built-in algorithm verifies ndt tokens
                    batch = h.make_batch(attn, PREFIXES, width, torch.Generator().manual_seed(width))
                    fb = h.forward_batch(batch, attn)
                    fb.spec_algorithm = algo
                    for phase in ("eager", "capture", "replay"):
                        for key, this, args, kwargs in record_step(h, attn, fb, batch, targets, phase):
                            owner, attr, patch, original = installed[key]
                            row = f"{phase:<7} {key} [{patch.name}] {label} width {width}"
                            reached[patch.name].add(phase)
                            if row in rows:
                                continue  # a function called once per layer: time its first call
                            current = vars(owner)[attr]
                            with no_kernels(h):
                                full = per_call_ns(lambda: current(this, *args, **kwargs))
                                bare = per_call_ns(lambda: original(this, *args, **kwargs))
                            entry = {"phase": phase, "function": key, "patch": patch.name, "algorithm": label,
                                     "width": width, "full_patched_ns": full, "full_original_ns": bare}
                            if isinstance(patch, WrapPatch):
                                stub = stub_like(original)
                                wrapped = patch.wrapper(stub)
                                entry["own_wrapped_ns"] = per_call_ns(lambda: wrapped(this, *args, **kwargs))
                                entry["own_stub_ns"] = per_call_ns(lambda: stub(this, *args, **kwargs))
                            rows[row] = entry
    not_reached = {p.name: _where(p) for p in applied if p.name not in reached}
    return rows, {k: sorted(v) for k, v in reached.items()}, not_reached


def _where(patch) -> str:
    return ", ".join(str(t) for t in patch.alternatives)


def width_costs(algorithms):
    """The width answer per algorithm kind, and whether the draft worker may verify."""
    hook = "get_num_tokens_per_req_for_target_verify"
    out = {}
    for label, algo in algorithms.items():
        width = getattr(algo, hook)
        draft = algo.supports_target_verify_for_draft
        out[label] = {"width_ns": per_call_ns(lambda: width(NDT, False)),
                      "draft_may_verify_ns": per_call_ns(draft)}
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from sglang_spec_plugins.testing.cpu import install_stand_ins, run_sglang_plugin_loading

    install_stand_ins()
    with tempfile.TemporaryDirectory() as tmp:
        toml = Path(tmp, "plugins.toml")
        toml.write_text(SBD_TOML)
        os.environ["SGLANG_SPEC_PLUGINS_CONFIG"] = str(toml)
        os.environ.pop("SGLANG_SPEC_PLUGINS", None)
        run_sglang_plugin_loading()
    from sglang.srt.speculative import spec_registry
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    spec_registry.register_algorithm("STOCK_BENCH")(lambda server_args: object)
    algorithms = {"EAGLE (built-in)": SpeculativeAlgorithm.EAGLE,
                  "stock CustomSpecAlgo": SpeculativeAlgorithm.from_string("STOCK_BENCH"),
                  "plugin": SpeculativeAlgorithm.from_string("SBD")}
    assert algorithms["plugin"].get_num_tokens_per_req_for_target_verify(NDT, False) == PLUGIN_WIDTH

    widths = width_costs(algorithms)
    rows, reached, not_reached = backend_costs({k: v for k, v in algorithms.items() if k != "stock CustomSpecAlgo"})

    stock = widths["stock CustomSpecAlgo"]["width_ns"]
    print(f"width query (ns): " + ", ".join(f"{k} {v['width_ns']:.0f}" for k, v in widths.items())
          + f"; plugin/stock {widths['plugin']['width_ns'] / stock:.2f}, added {widths['plugin']['width_ns'] - stock:.0f} ns")
    print(f"{'call (phase, function, patch, algorithm, width)':<100}{'full ratio':>11}{'own added ns':>13}")
    for label, r in rows.items():
        added = r["own_wrapped_ns"] - r["own_stub_ns"] if "own_wrapped_ns" in r else float("nan")
        print(f"{label:<100}{r['full_patched_ns'] / r['full_original_ns']:>11.3f}{added:>13.0f}")
    if not_reached:
        print("applied but not on a backend TARGET_VERIFY step:", ", ".join(not_reached))
    if args.out:
        import sglang
        import torch

        summary = {}
        for r in rows.values():
            key = f"{r['phase']} {r['function']} ({r['patch']})"
            summary.setdefault(key, []).append(r)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                        "python": platform.python_version(), "sglang": sglang.__version__, "torch": torch.__version__,
                        "load_average_1m": round(os.getloadavg()[0], 2)},
            "setup": {"ndt": NDT, "plugin_width": PLUGIN_WIDTH, "max_width": MAX_WIDTH, "batch_size": BS, "page_size": PAGE,
                      "backend": "trtllm_mha (SM90 / XQA path), CPU harness, Triton interpreter"},
            "width_query_ns": {k: {m: round(v, 1) for m, v in r.items()} for k, r in widths.items()},
            "width_query_ratio_plugin_to_stock": round(widths["plugin"]["width_ns"] / stock, 2),
            "calls": [{k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()} for r in rows.values()],
            "max_own_added_ns": round(max((r["own_wrapped_ns"] - r["own_stub_ns"] for r in rows.values()
                                           if "own_wrapped_ns" in r), default=0.0), 1),
            "median_full_ratio": round(statistics.median(r["full_patched_ns"] / r["full_original_ns"] for r in rows.values()), 3),
            "phases_reached_per_patch": reached,
            "applied_not_on_backend_step": not_reached,
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
