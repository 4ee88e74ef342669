"""What the plugin layer costs where SGLang asks for the verify width.

Side by side in one process on real SGLang: the width and draft answers from
(a) a built-in enum member, (b) a stock CustomSpecAlgo registered directly,
(c) a plugin algorithm registered by our loader (cached policy), plus the
loader's own start-up time (SGLang's load_plugins() with the bundled
plugins.toml). Then what the attention-backend wrappers add per call, each
against the same call unwrapped: the eager TARGET_VERIFY batch check
(``verify_batch.checking``, once per forward step in eager mode) and the XQA
mask wrapper (``trtllm_mha.xqa_mask``, once per layer per verify step),
around a no-op so that only the wrapper is timed. Prints tables and writes
JSON (with machine and date) when given --out.

    .venv/bin/python benchmarks/hot_path.py --out benchmarks/results/hot_path.json
"""

import argparse
import json
import os
import platform
import sys
import time
import timeit
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def per_call_ns(fn, number=200_000, repeat=7):
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from sglang_cpu import install_stand_ins, run_sglang_plugin_loading

    install_stand_ins()
    os.environ.setdefault("SGLANG_SPEC_PLUGINS_CONFIG", str(ROOT / "plugins.toml"))
    import sglang.srt.plugins  # noqa: F401  (import SGLang before timing the loader)
    from sglang.srt.speculative import spec_registry
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    started = time.perf_counter()
    run_sglang_plugin_loading()
    load_ms = (time.perf_counter() - started) * 1e3

    spec_registry.register_algorithm("STOCK_BENCH")(lambda server_args: object)
    subjects = {
        "built-in EAGLE (enum)": SpeculativeAlgorithm.EAGLE,
        "stock CustomSpecAlgo": SpeculativeAlgorithm.from_string("STOCK_BENCH"),
        "plugin algorithm SBD": SpeculativeAlgorithm.from_string("SBD"),
    }
    hook = "get_num_tokens_per_req_for_target_verify"
    rows = {}
    for label, algo in subjects.items():
        width = getattr(algo, hook)
        draft = algo.supports_target_verify_for_draft
        rows[label] = {
            "width_ns": per_call_ns(lambda: width(16, False)),
            "draft_may_verify_ns": per_call_ns(draft),
        }
    wrappers = wrapper_costs(subjects)
    base = rows["stock CustomSpecAlgo"]
    print(f"loader start-up (SGLang load_plugins(), 2 plugins, 2 algorithms): {load_ms:.1f} ms")
    print(f"{'subject':<26}{'width ns':>10}{'ratio':>8}{'draft ns':>10}{'ratio':>8}")
    for label, row in rows.items():
        print(f"{label:<26}{row['width_ns']:>10.1f}{row['width_ns'] / base['width_ns']:>8.2f}"
              f"{row['draft_may_verify_ns']:>10.1f}{row['draft_may_verify_ns'] / base['draft_may_verify_ns']:>8.2f}")
    print(f"{'backend wrapper':<52}{'ns':>8}{'bare ns':>9}{'added':>8}")
    for label, (wrapped, bare) in wrappers.items():
        print(f"{label:<52}{wrapped:>8.1f}{bare:>9.1f}{wrapped - bare:>8.1f}")
    if args.out:
        import sglang
        import torch

        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                        "python": platform.python_version(), "sglang": sglang.__version__, "torch": torch.__version__},
            "loader_startup_ms": round(load_ms, 1),
            "per_call_ns": {k: {m: round(v, 1) for m, v in r.items()} for k, r in rows.items()},
            "ratio_to_stock": {k: round(r["width_ns"] / base["width_ns"], 2) for k, r in rows.items()},
            "backend_wrappers_ns": {k: {"wrapped": round(w, 1), "bare": round(b, 1), "added": round(w - b, 1)}
                                    for k, (w, b) in wrappers.items()},
        }, indent=2) + "\n")


def wrapper_costs(subjects):
    """{label: (wrapped ns, bare ns)} for the backend wrappers around a no-op."""
    from types import SimpleNamespace

    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from sglang_spec_plugins.patches.trtllm_mha import _xqa_mask_wrapper
    from sglang_spec_plugins.patches.verify_batch import checking

    def noop(self, *args, **kwargs):
        return None

    backend = SimpleNamespace(speculative_num_draft_tokens=4)
    check = checking(lambda b: b.speculative_num_draft_tokens, "bench")(noop)
    out = {}
    for label in ("built-in EAGLE (enum)", "plugin algorithm SBD"):
        fb = SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY, spec_info=None, spec_algorithm=subjects[label],
                             input_ids=torch.zeros(32, dtype=torch.int64), batch_size=8)
        out[f"eager batch check, {label}"] = (per_call_ns(lambda: check(backend, fb)), per_call_ns(lambda: noop(backend, fb)))
    xqa = _xqa_mask_wrapper(noop)
    mask = torch.zeros(9, 4, 2, dtype=torch.uint16)
    for width in (4, 2):
        kw = dict(q_len_per_req=width, mask=mask)
        out[f"xqa mask, width {width} (ndt 4)"] = (per_call_ns(lambda: xqa(backend, **kw)), per_call_ns(lambda: noop(backend, **kw)))
    return out


if __name__ == "__main__":
    main()
