"""Host cost of choosing each step's width: what widths by acceptance and the declared-width check add to a step.

Per decode step a worker asks ``StepWidths.at`` and hands back ``record(accept_lens)``; with
``widths_by_acceptance`` on, that is the controller's ``width``/``observe``/``due`` and the step clock, and
every ``interval_steps`` steps its ``decide`` (a switch picks another captured CUDA graph: nothing is
recaptured, so the decision is all a switch costs on the host). ``ModelRunner.forward`` runs the
declared-width check (``verify_batch.check_declared``) before every TARGET_VERIFY. This times, in one
process and without SGLang, the package's own code for each: the controller fed a batch of 64 requests over
the slots of a 5-bucket table, the clock, and the check on a 64-request batch at a declared width (the
PROMPT_LOOKUP example installed, for a policy built as the loader builds it).

    .venv/bin/python benchmarks/step_widths_cost.py --out benchmarks/results/step_widths_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import timeit
import types
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglang_spec_plugins.engine.step_times import StepClock  # noqa: E402
from sglang_spec_plugins.widths_by_acceptance import AcceptanceSettings, WidthsByAcceptance  # noqa: E402
from sglang_spec_plugins.widths_by_batch_size import WidthsByBatchSize  # noqa: E402

TABLE = WidthsByBatchSize.parse({1: [2, 4, 8, 16], 8: [1, 2, 4, 8, 16], 32: [1, 2, 4, 8], 64: [1, 2, 4], 128: [1, 2, 4]})
BATCH = 64


def per_call_us(func, number: int, repeat: int = 7) -> float:
    return statistics.median(timeit.repeat(func, number=number, repeat=repeat)) / number * 1e6


def controller_step_us(settings: AcceptanceSettings) -> dict:
    """One step of a slot: width, clock start, clock stop, observe, due (and decide when due)."""
    controller, clock = WidthsByAcceptance(TABLE, settings, log=False), StepClock()
    slot = TABLE.bucket(BATCH)
    step = {"n": 0}

    def one_step():
        width = controller.width(slot)
        clock.start()
        clock.stop(slot, width, BATCH)
        controller.observe(slot, width, BATCH + (step["n"] % 3) * BATCH, BATCH, BATCH)
        step["n"] += 1
        if controller.due(slot):
            controller.decide(slot, clock.take(slot))

    for _ in range(200):  # past the warm-up: decisions happen
        one_step()
    switches = controller.switches
    decide_only = WidthsByAcceptance(TABLE, settings, log=False)
    decide_only.observe(slot, decide_only.width(slot), 2 * BATCH, BATCH)
    return {"step_us": per_call_us(one_step, 20000),
            "decide_us": per_call_us(lambda: decide_only.decide(slot, {(BATCH, 2): 0.01, (BATCH, 4): 0.015}), 20000),
            "switches_in_the_first_200_steps": switches}


def declared_check_us() -> float:
    """verify_batch.check_declared on a 64-request TARGET_VERIFY batch at a declared width, for the
    installed PROMPT_LOOKUP example's policy as the loader builds it."""
    import torch

    from sglang_spec_plugins.patches.verify_batch import check_declared
    from sglang_spec_plugins.plugins import discover_configured
    from sglang_spec_plugins.policy import build_policies

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plugins.toml"
        path.write_text('[plugins]\nenable = ["prompt_lookup"]\n[algorithms.PROMPT_LOOKUP]\nmax_tokens_per_req = 16\n'
                        f"widths_by_batch_size = {TABLE}\n")
        _, policies = build_policies(discover_configured(path), tolerate=False)
    policy = policies["PROMPT_LOOKUP"]
    policy.validate(16)
    mode = types.SimpleNamespace(is_target_verify=lambda: True)
    batch = types.SimpleNamespace(forward_mode=mode, spec_info=None, spec_algorithm=None, batch_size=BATCH,
                                  input_ids=torch.zeros(BATCH * 4, dtype=torch.int64))
    return per_call_us(lambda: check_declared(policy, batch, 16, False), 20000)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import torch

    result = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared with other work while measured)",
        "python": platform.python_version(), "torch": torch.__version__, "command": " ".join(sys.argv),
        "batch": BATCH, "table": str(TABLE),
        "controller_default": controller_step_us(AcceptanceSettings()),
        "controller_every_step": controller_step_us(AcceptanceSettings(warmup_steps=0, interval_steps=1)),
        "declared_check_us": declared_check_us(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
