"""What the installed SGLang will do with a plugin setup, said before a server starts.

:func:`predict` is ``check``'s look at SGLang: whether this release can
serve plugin algorithms at all (probe and patch plans), whether SGLang will
refuse an algorithm for its overlap support, whether each worker class fits
the release's worker contract, and whether each algorithm's own
``validate_server_args`` accepts the arguments SGLang would hand it. It
imports SGLang only when SGLang is installed, and never starts anything.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..plugins import PluginSet
from ..engine.cpu_harness import prepare
from ..engine.probe import probe


def predict(
    plugin_set: PluginSet,
    policies: Mapping[str, Any],
    ndts: Sequence[int],
    disable_overlap: bool,
    attention_backend: Optional[str] = None,
    dp_attention: bool = False,
    model_path: Optional[str] = None,
    draft_model_path: Optional[str] = None,
    capture_sizes: Optional[Sequence[int]] = None,
) -> Dict[str, Any]:
    """``{"version", "summary", "lines", "problems", "backends", "modes", "not_run"}`` for the
    installed SGLang (``not_run``: where it is not installed, the plugin code
    it could not run). ``backends`` says, per algorithm, ndt and worker (the
    target, and the draft worker where it verifies), what each attention
    backend does with that width and verify shape; ``modes`` whether each runs
    under SGLang's overlap scheduler and why; ``lines`` also say which request
    kinds the worker bases serve on the release
    (``attention_backend`` alone when the operator names one; a refusal of
    that one is a problem). ``dp_attention``: the server runs attention
    data-parallel (``--enable-dp-attention``, ``--attn-dp-size`` above 1);
    without ``ndts``, its refusal is judged at the default ndts ``check`` resolved.
    ``model_path`` and ``draft_model_path``: its ``--model-path`` and
    ``--speculative-draft-model-path``, where given; ``capture_sizes``: its
    ``--cuda-graph-bs`` (flashinfer's workspace is judged at those sizes)."""
    harness = prepare()
    found = probe()
    if not found.installed:
        not_run = [_not_run(plugin_set.algorithms[name]) for name in policies]
        return {"version": None, "summary": f"not installed here; not run: {'; '.join(not_run)}, and the checks on "
                                            "the SGLang release" if not_run else "not installed here",
                "lines": [], "problems": [], "backends": {}, "modes": {}, "cpu_harness": None, "not_run": not_run}
    problems: List[str] = []
    lines: List[str] = []
    names = ", ".join(policies) or "no algorithm"
    from ..patches import Verdict, serving_plans

    plans, reasons = serving_plans(found)
    lines += [f"patch {name}: {plan.verdict}" for name, plan in plans.items() if plan.verdict == Verdict.APPLY]
    if reasons:
        if policies:
            problems.append(f"SGLang {found.version} cannot serve {names}: {'; '.join(reasons)}; the loader will register nothing")
        return {"version": found.version, "summary": f"{found.version}: cannot serve plugin algorithms", "lines": reasons,
                "problems": problems, "backends": {}, "modes": {}, "cpu_harness": harness, "not_run": []}

    from ..engine.facts import DRAFT, TARGET, draft_backend
    from ..engine.request_kinds import summary as kinds_summary
    from ..engine.worker_contract import OVERLAP_FLAG, contract, overlap_mode
    from ..patches.attention_support import KNOWN_BACKENDS, support_at_widths
    from ..patches.support import Serving
    from .draft_model_check import overlap_refused
    from .startup_check import dp_attention_faults, fallback_phrase, faults, verifying_workers

    backends: Dict[str, Dict[str, Dict[str, Dict[str, str]]]] = {}

    release = contract()
    known = attention_backend_choices()
    if attention_backend and known and attention_backend not in known:
        problems.append(f"--attention-backend {attention_backend}: SGLang {found.version} has no such attention backend "
                        f"(it accepts: {', '.join(known)})")
    named = {TARGET: attention_backend, DRAFT: attention_backend} if attention_backend else {}
    modes: Dict[str, Dict[str, Any]] = {}
    if policies:
        lines.append(f"request kinds (the worker bases of sglang_spec_plugins.worker): {kinds_summary(release)}")
    for name, policy in policies.items():
        offered = plugin_set.algorithms[name]
        origin = plugin_set.error(offered.plugin, f"algorithm {name}")
        overlapped, why = overlap_mode(offered.spec.supports_overlap, disable_overlap, release)
        if overlapped and overlap_refused(offered):
            overlapped, why = False, (f"refused: SGLang {found.version}'s overlap scheduler decides for DFLASH alone "
                                      f"(see the problems); {OVERLAP_FLAG} runs it synchronously")
        modes[name] = {"overlap": overlapped, "why": why}
        lines.append(f"{name} runs {why}")
        for ndt in ndts or [None]:
            try:
                args = server_args(name, ndt, disable_overlap, dp_attention, model_path, draft_model_path)
            except Exception as exc:
                lines.append(f"validate_server_args and worker_factory not run for {name}: ServerArgs could not be built here: {type(exc).__name__}: {exc}")
                args = None
            # what the loader's start-up check (serving/startup_check) will refuse while SGLang resolves its arguments
            problems += [f"{origin}: {line}" for line in faults(
                offered, policy, args, found.version, ndt=ndt, disable_overlap=disable_overlap, backends=named,
                dp_attention=dp_attention, draft_config=draft_model_path is not None,
                release=release, validate=ndt is not None and args is not None, factory=args is not None,
                capture_sizes=capture_sizes, model_path=model_path)]
        if dp_attention and not ndts:  # the widths ``check`` resolved at its default ndts
            refused: Dict[str, int] = {}
            for ndt in sorted({n for n, _ in policy.width_cache}):
                for line in dp_attention_faults(policy, ndt):
                    refused.setdefault(line, ndt)
            problems += [f"{origin}: {line} (found at a default ndt; `check -n {ndt}` shows it alone)"
                         for line, ndt in refused.items()]
        if offered.spec.draft_model is not None and draft_model_path is None:
            lines.append(f"{name}: its draft model was not checked (pass --speculative-draft-model-path, and --model-path "
                         "for the target it drafts for)")
        for ndt in ndts:
            for draft in verifying_workers(policy, ndt):  # a refused width is reported already
                shape, worker = offered.spec.verify_shape, DRAFT if draft else TARGET
                widths = policy.candidate_widths(ndt, draft)
                for backend in [attention_backend] if attention_backend else KNOWN_BACKENDS:
                    served = draft_backend(backend) if draft else backend  # SGLang's draft-worker builder's choice
                    width, support = support_at_widths(served, policy, ndt, shape, draft)
                    at = "" if len(widths) == 1 else f"at widths {', '.join(map(str, widths))}: " if support.verdict != Serving.REFUSED \
                        else f"at width {width}: "
                    if served != backend:
                        at = f"{fallback_phrase(backend, served, found.version)}: {served} {at}"
                    backends.setdefault(name, {}).setdefault(str(ndt), {}).setdefault(worker, {})[backend] = {
                        "verdict": support.verdict, "reason": at + support.reason, "runs_on": served}
    return {"version": found.version, "summary": f"{found.version}: can serve plugin algorithms", "lines": lines,
            "problems": sorted(set(problems), key=problems.index), "backends": backends, "modes": modes,
            "cpu_harness": harness, "not_run": []}


def _not_run(offered) -> str:
    """What ``check`` cannot run of ``offered`` without SGLang: the plugin code SGLang hands its ``ServerArgs``."""
    code = "validate_server_args and worker_factory" if offered.spec.validate_server_args else "worker_factory"
    need = "need" if offered.spec.validate_server_args else "needs"
    return f"{code} of {offered.name} (plugin {offered.plugin!r}), which {need} SGLang's ServerArgs"


def attention_backend_choices() -> tuple:
    """The ``--attention-backend`` values the installed release accepts (its
    own ``ATTENTION_BACKEND_CHOICES``), or () where it has no such list."""
    for module in ("sglang.srt.arg_groups.choices", "sglang.srt.server_args"):  # 0.5.2x, older
        try:
            return tuple(importlib.import_module(module).ATTENTION_BACKEND_CHOICES)
        except (ImportError, AttributeError):
            continue
    return ()


def server_args(algorithm: str, num_draft_tokens: Any, disable_overlap: bool, dp_attention: bool = False,
                model_path: Optional[str] = None, draft_model_path: Optional[str] = None) -> Any:
    """The installed release's own ``ServerArgs`` with the speculative
    arguments an operator would pass (a placeholder model path unless one is
    given: SGLang's argument pipeline stops before anything model-specific)."""
    from sglang.srt.server_args import ServerArgs

    from .draft_model_check import PLACEHOLDER_MODEL_PATH

    return ServerArgs(model_path=model_path or PLACEHOLDER_MODEL_PATH, speculative_algorithm=algorithm,
                      speculative_num_draft_tokens=num_draft_tokens, disable_overlap_schedule=disable_overlap,
                      enable_dp_attention=dp_attention, speculative_draft_model_path=draft_model_path)
