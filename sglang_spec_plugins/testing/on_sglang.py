"""The kit's checks that need SGLang, run in a fresh process by
:func:`sglang_spec_plugins.testing.checks.on_sglang`.

``python -m sglang_spec_plugins.testing.on_sglang '{"plugin": ..., "ndts": {ALGORITHM: [ndt, ...]}, "sections": [...]}'``
starts plugins the way SGLang does (its own ``load_plugins()``, which runs
the loader; ``SGLANG_SPEC_PLUGINS`` names the plugin), then per algorithm:

* ``registry``: SGLang's registry holds the algorithm, and the algorithm
  object SGLang's runners ask (every width-hook name the release calls,
  ``supports_target_verify_for_draft``, ``resolve_max_speculative_num_draft_tokens``)
  and SGLang's ``spec_utils.resolve_num_tokens_per_req`` (0.5.16+) give the
  plugin's answers;
* ``start``: ``validate_server_args`` on a real ``ServerArgs`` for each
  accepted ndt; SGLang's own ``create_worker`` refuses exactly when
  :func:`~sglang_spec_plugins.engine.worker_contract.overlap_flag_needed`
  says the operator must pass ``--disable-overlap-schedule``, and with the
  operator's flags returns the worker class;
* ``worker``: that class fits the release's worker contract;
* ``draft_model`` (an algorithm declaring a ``DraftModel``): the class is
  built on ``draft_model_worker_base()``, its draft runner may verify, and the
  start-up check accepts a DFlash-layout draft sized for the tiny Llama target
  with the block the plugin answers (``testing.draft_checkpoint``);
* ``attention``: per attention backend the kit has a CPU harness for, one
  TARGET_VERIFY batch at each of the plugin's widths, laid out by the
  backend's own metadata code (eager, graph capture, graph replay) with the
  loader's patches, gives the attention computed from the batch definition.

It prints one JSON line: ``{"release": ..., "algorithms": {NAME: {section:
{"problems": [...], ...}}}}`` or ``{"error": ...}``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # SGLang's Triton metadata kernels, on a CPU

import json  # noqa: E402
import sys  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import Any, Dict, List  # noqa: E402

from ..engine.cpu_harness import prepare  # noqa: E402
from ..errors import PluginError, SpecPluginError  # noqa: E402
from ..plugin_calls import report_stream  # noqa: E402
from .cpu import run_sglang_plugin_loading  # noqa: E402

SECTIONS = ("registry", "start", "worker", "draft_model", "attention")

ATTENTION_NDT_BATCH = (5, 17, 3)
"""Prefix lengths of the TARGET_VERIFY batch the attention check lays out."""

ATTENTION_NDT = 4
"""The num_draft_tokens the attention check uses when the algorithm accepts
it (else the first it accepts)."""


def real_server_args(**fields):
    """A real ``ServerArgs`` (SGLang's own tests build it this way) carrying ``fields``."""
    from sglang.srt.server_args import ServerArgs

    from ..serving.draft_model_check import PLACEHOLDER_MODEL_PATH

    args = ServerArgs(model_path=PLACEHOLDER_MODEL_PATH)
    for name, value in fields.items():
        setattr(args, name, value)
    return args


def registry_section(name, policy, ndts) -> Dict[str, Any]:
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from ..engine.probe import probe

    problems: List[str] = []
    algo = SpeculativeAlgorithm.from_string(name)
    if getattr(algo, "policy", None) is not policy:
        return {"problems": [f"SGLang's registry resolves {name} to {algo!r}, not the plugin's algorithm"]}
    hooks = probe().width_hooks or ("get_num_tokens_per_req_for_target_verify",)
    resolve = _spec_utils_width()
    for ndt in ndts:
        for is_draft in (False, True):
            want = policy.width(ndt, is_draft)
            for hook in hooks:
                got = getattr(algo, hook)(ndt, is_draft)
                if got != want:
                    problems.append(f"SGLang's {hook}({ndt}, {is_draft}) gives {got}, the plugin answered {want}")
            if resolve is not None:
                got = resolve(algo, ndt, is_draft)
                if got != want:
                    problems.append(f"SGLang's spec_utils.resolve_num_tokens_per_req(target_verify, num_draft_tokens={ndt}, "
                                    f"is_draft_worker={is_draft}) gives {got}, the plugin answered {want}")
        got_max = algo.resolve_max_speculative_num_draft_tokens(SimpleNamespace(speculative_num_draft_tokens=ndt))
        if got_max != policy.max_width(ndt):
            problems.append(f"SGLang's resolve_max_speculative_num_draft_tokens at ndt={ndt} gives {got_max}, "
                            f"the plugin's maximum is {policy.max_width(ndt)}")
    if probe().draft_check and algo.supports_target_verify_for_draft() != policy.draft_may_verify():
        problems.append(f"SGLang's supports_target_verify_for_draft() gives {algo.supports_target_verify_for_draft()}, "
                        f"the plugin answered {policy.draft_may_verify()}")
    return {"problems": problems, "hooks": list(hooks), "spec_utils": resolve is not None}


def _spec_utils_width():
    """``(algorithm, ndt, is_draft_worker) -> width`` through SGLang's
    ``spec_utils.resolve_num_tokens_per_req`` (0.5.16+, what its model runner
    and decode CUDA-graph runner call), with server args published the
    release's own way; None before 0.5.16."""
    import importlib
    import inspect

    spec_utils = importlib.import_module("sglang.srt.speculative.spec_utils")
    resolve = getattr(spec_utils, "resolve_num_tokens_per_req", None)
    if resolve is None:
        return None
    takes_args = "server_args" in inspect.signature(resolve).parameters  # 0.5.16-0.5.18

    def width(algo, ndt, is_draft):
        from sglang.srt.runtime_context import get_context

        with get_context().override_server_args(speculative_num_draft_tokens=ndt) as server_args:
            extra = {"server_args": server_args} if takes_args else {}
            return resolve(phase="target_verify", spec_algorithm=algo, is_draft_worker=is_draft,
                           num_draft_tokens=ndt, **extra)

    return width


def start_section(name, offered, ndts) -> Dict[str, Any]:
    """What SGLang does at start-up with the operator command the README gives."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from ..engine.worker_contract import OVERLAP_FLAG, contract, overlap_flag_needed
    from ..serving.draft_model_check import overlap_refused

    algo = SpeculativeAlgorithm.from_string(name)
    flag = overlap_flag_needed(offered.spec.supports_overlap, contract())  # SGLang's create_worker refuses without it
    command_flag = OVERLAP_FLAG if flag or overlap_refused(offered) else None  # or the start-up check does
    problems: List[str] = []
    validate = offered.spec.validate_server_args
    for ndt in ndts:
        args = real_server_args(speculative_algorithm=name, speculative_num_draft_tokens=ndt,
                                disable_overlap_schedule=command_flag is not None)
        if validate is not None:
            try:
                validate(args)
            except Exception as exc:
                problems.append(f"validate_server_args(ServerArgs(speculative_num_draft_tokens={ndt})) raised "
                                f"{type(exc).__name__}: {exc} on a real ServerArgs, but accepted the same values "
                                "without SGLang")
    overlap_on = real_server_args(speculative_algorithm=name, speculative_num_draft_tokens=ndts[0],
                                  disable_overlap_schedule=False)
    try:
        algo.create_worker(overlap_on)
        refused = None
    except ValueError as exc:
        refused = str(exc)
    if (refused is not None) != (flag is not None):
        problems.append(f"SGLang's create_worker {'refuses' if refused else 'accepts'} supports_overlap="
                        f"{offered.spec.supports_overlap} with overlap scheduling on, but sglang-spec-plugins "
                        f"predicts {flag or 'no flag'}: report this to sglang-spec-plugins ({refused or ''})")
    command = real_server_args(speculative_algorithm=name, speculative_num_draft_tokens=ndts[0],
                               disable_overlap_schedule=command_flag is not None)
    worker = None
    try:
        worker = algo.create_worker(command)
    except Exception as exc:
        problems.append(f"with the operator command's flags ({command_flag or 'none'}) SGLang's create_worker raised "
                        f"{type(exc).__name__}: {exc}")
    return {"problems": problems, "flag": command_flag, "worker": worker}


def worker_section(name, worker) -> Dict[str, Any]:
    from ..engine.worker_contract import check_worker, contract

    if worker is None:
        return {"problems": [], "not_run": f"no worker class: SGLang's create_worker failed ({name}::sglang_start)"}
    found = contract()
    named = f"{worker.__module__}.{worker.__qualname__}" if isinstance(worker, type) else None
    return {"problems": check_worker(worker, found), "class": named, "constructor_kwargs": list(found.constructor_kwargs)}


def draft_model_section(offered, policy, ndts, worker) -> Dict[str, Any]:
    """What a draft-model drafter must be besides a worker (see the module doc)."""
    import tempfile
    from pathlib import Path

    from ..engine.probe import probe
    from ..serving.draft_model_check import draft_model_faults
    from ..worker import draft_model_worker_base
    from .draft_checkpoint import dflash_draft
    from .scheduler_start import TINY_LLAMA

    problems: List[str] = []
    if worker is not None and not issubclass(worker, draft_model_worker_base()):
        problems.append(f"it declares a DraftModel, but its worker {worker.__qualname__} is not built on "
                        "sglang_spec_plugins.worker.draft_model_worker_base(), which builds the draft worker")
    if not policy.draft_may_verify():
        problems.append("it declares a DraftModel, but sgl_spec_draft_may_verify is not True: the draft runner drafts "
                        "in a TARGET_VERIFY forward")
    ndt = ndts[0]
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp, "target")
        target.mkdir()
        (target / "config.json").write_text(json.dumps(TINY_LLAMA))
        policy.validate(ndt)
        draft = dflash_draft(Path(tmp, "draft"), TINY_LLAMA, block_size=policy.width(ndt, True), mask_token_id=3,
                             target_layer_ids=[0])
        args = real_server_args(speculative_algorithm=offered.name, speculative_num_draft_tokens=ndt,
                                model_path=str(target), speculative_draft_model_path=str(draft),
                                disable_overlap_schedule=True)
        problems += [f"the start-up check refuses a DFlash draft of the plugin's own block at "
                     f"--speculative-num-draft-tokens {ndt}: {p}"
                     for p in draft_model_faults(offered, policy, args, probe().version, ndt)]
    return {"problems": problems}


def attention_section(name, policy, ndts) -> Dict[str, Any]:
    """Each distinct width at the first accepted ndt through each backend harness."""
    import pytest

    ndt = ATTENTION_NDT if ATTENTION_NDT in ndts else ndts[0]
    widths = sorted({policy.width(ndt, False)} | ({policy.width(ndt, True)} if policy.draft_may_verify() else set()))
    problems: List[str] = []
    checked: Dict[str, List[int]] = {}
    for backend, run in (("trtllm_mha", _trtllm_case), ("aiter", _aiter_case)):
        for width in widths:
            with pytest.MonkeyPatch.context() as mp:
                try:
                    bad = run(mp, ndt, width, policy.max_width(ndt))
                except Exception as exc:
                    bad = [f"raised {type(exc).__name__}: {exc}"]
            problems += [f"{backend}, num_draft_tokens={ndt}, width {width}: {p}" for p in bad]
            checked.setdefault(backend, []).append(width)
    return {"problems": problems, "checked": checked, "ndt": ndt}


def _trtllm_case(mp, ndt, width, max_width) -> List[str]:
    import torch

    from . import trtllm as h

    bad = []
    with h.backend(mp, ndt, 16, len(ATTENTION_NDT_BATCH), graph_width=max(ndt, max_width)) as attn:
        gen = torch.Generator().manual_seed(0)
        for phase in ("eager", "capture", "replay"):
            batch = h.make_batch(attn, list(ATTENTION_NDT_BATCH), width, gen)
            m = h.init_metadata(attn, h.forward_batch(batch, attn), phase)
            if phase == "capture" and h.legacy():
                continue  # up to 0.5.12.post1 the page table is filled by the replay before every real forward
            got = h.paged_attention(m, batch.q, *h.kv_buffers(attn), attn.page_size)
            if not torch.allclose(got, h.reference_attention(batch, attn), atol=1e-5, rtol=1e-4):
                bad.append(f"{phase}: attention through the backend's metadata differs from the batch definition")
    return bad


def _aiter_case(mp, ndt, width, max_width) -> List[str]:
    import torch

    from . import aiter as aiter_harness

    bs = len(ATTENTION_NDT_BATCH)
    harness = aiter_harness.Harness(mp, ndt=ndt, page_size=16, max_reqs=bs)
    bad = []
    try:
        for mode in ("eager", "capture", "replay"):
            batch = harness.batch(list(ATTENTION_NDT_BATCH), width)
            out, _ = harness.run(mode, batch, bs)
            if not torch.allclose(out, batch.expected(harness), atol=1e-5, rtol=1e-4):
                bad.append(f"{mode}: attention through the backend's metadata differs from the batch definition")
    finally:
        harness.close()
    return bad


def main(request: Dict[str, Any]) -> Dict[str, Any]:
    prepare()  # a CPU-only torch: torchvision's CUDA operators cannot load (see engine.cpu_harness)
    try:
        run_sglang_plugin_loading()
        from .. import loader

        report = loader.load()
    except (Exception, SystemExit) as exc:
        cause = getattr(exc, "cause", exc)
        if not (isinstance(cause, PluginError) and cause.plugin == request["plugin"]):
            return {"error": f"SGLang's plugin loading stopped here, not for plugin {request['plugin']!r}: {cause}"}
        return {"error": f"SGLang's plugin loading refused plugin {request['plugin']!r}: {cause}"}
    from ..engine.probe import probe

    out: Dict[str, Any] = {"release": probe().version, "algorithms": {}}
    for name, ndts in request["ndts"].items():
        policy = report.policies.get(name)
        if policy is None:
            out["algorithms"][name] = {"registry": {"problems": [f"the loader did not register {name}"]}}
            continue
        offered = report.plugins.algorithms[name]
        wanted = request.get("sections", SECTIONS)
        found: Dict[str, Any] = {}
        try:
            if "registry" in wanted:
                found["registry"] = registry_section(name, policy, ndts)
            if "start" in wanted or "worker" in wanted:
                start = start_section(name, offered, ndts)
                worker = start.pop("worker")
                found["start"] = start
                found["worker"] = worker_section(name, worker)
                if "draft_model" in wanted and offered.spec.draft_model is not None:
                    found["draft_model"] = draft_model_section(offered, policy, ndts, worker)
            if "attention" in wanted:
                found["attention"] = attention_section(name, policy, ndts)
        except SpecPluginError as exc:  # an answer refused on SGLang only: the sections left say so
            for section in wanted:
                found.setdefault(section, {"problems": [str(exc)]})
        out["algorithms"][name] = found
    return out


if __name__ == "__main__":
    with report_stream() as out:  # what SGLang and the plugin write to stdout must not mix with the report
        json.dump(main(json.loads(sys.argv[1])), out, default=str)
        out.write("\n")
