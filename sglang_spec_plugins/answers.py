"""Every answer SGLang asks a plugin algorithm for, as one table, here and in a fresh process.

:func:`table` resolves through an algorithm's policy what SGLang asks at each
``num_draft_tokens`` (the maximum, the target's width, the draft worker's
where it verifies, the widths by batch size of each) and whether the draft
worker may verify; ``check`` prints it and the conformance kit compares two
of them. :func:`in_fresh_process` computes the same tables, and the
fingerprint, in a new interpreter (``python -m sglang_spec_plugins.answers``):
answers that differ between two processes would differ between SGLang's
ranks. Nothing here imports SGLang.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Mapping, Optional

from .errors import SpecPluginError
from .plugin_calls import report_stream

TIMEOUT_S = 600
"""How long a fresh process may take before it is said to hang."""

BY_BATCH_SIZE = {False: "target_widths_by_batch_size", True: "draft_widths_by_batch_size"}
"""A row's keys for each worker's widths by batch size."""

CHOSEN_BY = {False: "target_chosen_by", True: "draft_chosen_by"}
"""A row's keys for who chooses each step's width among its bucket's (:meth:`~.policy.VerifyPolicy.chosen_by`)."""


class FreshProcessFailed(Exception):
    """The fresh process gave no answer table; ``str()`` says why, with the end of its output."""


def table(policy, ndts: Iterable[int], on_fault: Optional[Callable[[int, Exception], None]] = None) -> Dict[str, Any]:
    """``{"plugin", "draft_may_verify", "widths": {"<ndt>": row}}``; a row holds
    ``max``, ``target``, ``draft`` (only where the draft worker may verify:
    only then does it run TARGET_VERIFY at its width) and the widths by batch
    size of each such worker (``{"1": 16, "8": 8}``) where it has them, and,
    where a bucket gives several, who chooses a step's among them. A
    refused answer at one ndt raises, or goes to ``on_fault(ndt, error)`` and
    that ndt is left out."""
    verifies = policy.draft_may_verify()
    found: Dict[str, Any] = {"plugin": policy.plugin, "draft_may_verify": verifies, "widths": {}}
    for ndt in ndts:
        try:
            policy.validate(ndt)  # the draft worker's width too: SGLang sizes buffers with it
            row = {"target": policy.width(ndt, False), "max": policy.max_width(ndt)}
            if verifies:
                row["draft"] = policy.width(ndt, True)
            for draft in (False, True) if verifies else (False,):
                buckets = policy.widths_by_batch_size(ndt, draft)
                if buckets is not None:
                    row[BY_BATCH_SIZE[draft]] = buckets.as_plain()
                chooser = policy.chosen_by(ndt, draft)
                if chooser is not None:
                    row[CHOSEN_BY[draft]] = chooser
        except (SpecPluginError, ValueError) as exc:
            if on_fault is None:
                raise
            on_fault(ndt, exc)
            continue
        found["widths"][str(ndt)] = row
    return found


def in_fresh_process(config: Optional[Path], ndts: Mapping[str, Iterable[int]], sglang: Optional[str] = None,
                     env: Optional[Mapping[str, str]] = None, locate: bool = True) -> Dict[str, Any]:
    """What a new interpreter (environment ``env``, default this one's) finds
    for plugins.toml ``config`` (None: the one it locates, or with ``locate``
    False none: the defaults): ``{"fingerprint",
    "tables": {algorithm: table at ndts[algorithm]}, "problems"}``, the
    fingerprint computed for the SGLang release ``sglang``. FreshProcessFailed
    when it gives none (it failed, or hangs for :data:`TIMEOUT_S`: the end of
    its stderr names the plugin it was in)."""
    request = json.dumps({"config": str(config) if config else None, "locate": locate, "sglang": sglang,
                          "ndts": {name: list(values) for name, values in ndts.items()}})
    argv = [sys.executable, "-m", "sglang_spec_plugins.answers", request]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, env=dict(env) if env is not None else None,
                             timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise FreshProcessFailed(f"did not finish in {TIMEOUT_S} s: {_tail(err)}") from None
    try:
        report = json.loads(out.stdout)
    except ValueError:
        raise FreshProcessFailed(f"failed (exit {out.returncode}): {_tail(out.stderr or out.stdout)}") from None
    if "error" in report:
        raise FreshProcessFailed(report["error"])
    return report


def _tail(text: str) -> str:
    return text.strip()[-1500:] or "no output"


def _main(request: Dict[str, Any]) -> Dict[str, Any]:
    from .config import Config
    from .fingerprint import fingerprint
    from .plugins import discover, discover_configured
    from .policy import build_policies

    try:
        if request["config"] or request["locate"]:
            plugin_set = discover_configured(Path(request["config"]) if request["config"] else None, collect=True)
        else:
            plugin_set = discover(Config(), collect=True)
        plugin_set, policies = build_policies(plugin_set, tolerate=True)
    except SpecPluginError as exc:
        return {"error": str(exc)}
    problems = [failure.message for failure in plugin_set.failures]
    tables = {name: table(policy, request["ndts"].get(name, ()), lambda ndt, exc: problems.append(str(exc)))
              for name, policy in policies.items()}
    return {"fingerprint": fingerprint(plugin_set, policies, request["sglang"]), "tables": tables, "problems": problems}


if __name__ == "__main__":
    with report_stream() as out:
        json.dump(_main(json.loads(sys.argv[1])), out)
    sys.stdout.flush()
    os._exit(0)  # a plugin's threads must not keep the process alive
