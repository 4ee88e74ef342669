"""SGLang's own ``--speculative-algorithm DFLASH`` on the CPU harness: the reference a draft-model plugin is matched against.

What DFLASH needs that a CPU-only machine lacks, and what stands in for it,
each applied by :func:`serve_dflash_on_cpu` in the serving process only:

* a device: DFLASH's argument check refuses any device but CUDA (later releases NPU
  and XPU too) from 0.5.16 (``arg_groups.speculative_hook._handle_dflash``); its device
  test is read with ``cpu`` among them (one line of that function);
* its GPU code paths: the worker takes its Triton kernels (block
  preparation, accept/bonus, fused context-KV writes) where ``is_cuda() or
  is_hip()``, and its eager fallback for the block's KV slots
  (``assign_extend_cache_locs_func``) returns None on a CPU; the worker's
  module sees ``is_hip()`` True, so it runs the kernels it runs on a GPU,
  interpreted (``TRITON_INTERPRET=1``);
* CUDA stream bookkeeping: ``Tensor.record_stream`` (an operator with no CPU
  kernel, a no-op without a caching allocator) on the current stream, which
  ``torch.cpu.current_stream()`` returns in a type it does not take;
* ``input_embeds`` in the model's dtype: every release casts an eager
  forward's ``input_embeds`` to bfloat16 (``ModelRunner._extend_forward_kwargs``),
  which a float32 draft refuses, and the harness serves float32, since
  SGLang's Triton attention kernels interpreted on a CPU compute garbage in
  bfloat16 (measured: every output row 7.97e8, against a torch reference
  exact in float32). The loader's ``draft_model.input_embeds_dtype`` patch
  does this for draft-model plugins; here it is done for DFLASH too.

Nothing else of DFLASH changes: its worker, draft model, KV pools, scheduler
and kernels are the release's.
"""

from __future__ import annotations

import importlib

from ..patches.source_edit import Edit
from ..patches.unit import FunctionPatch, Target, Verdict

DEVICE_TESTS = (
    ('if not server_args.device.startswith("cuda"):', 'if not server_args.device.startswith(("cuda", "cpu")):'),  # 0.5.16
    ('if not (server_args.device.startswith("cuda") or server_args.device == "npu"):',
     'if not (server_args.device.startswith(("cuda", "cpu")) or server_args.device == "npu"):'),  # 0.5.17-0.5.18
    ('if not (cfg.device.startswith("cuda") or cfg.device == "npu"):',
     'if not (cfg.device.startswith(("cuda", "cpu")) or cfg.device == "npu"):'),  # 0.5.19
    ('cfg.device.startswith("cuda") or cfg.device == "npu" or cfg.device == "xpu"',
     'cfg.device.startswith(("cuda", "cpu")) or cfg.device == "npu" or cfg.device == "xpu"'),  # 0.5.20+
)
"""DFLASH's device test across releases, and the same test with ``cpu`` among the devices."""


def _device_patch() -> FunctionPatch:
    return FunctionPatch(
        name="cpu_harness.dflash_device", summary="DFLASH's device test accepts the CPU",
        alternatives=(Target("sglang.srt.arg_groups.speculative_hook", "_handle_dflash"),),
        edits=tuple(Edit(old=old, new=new, fixed_markers=tuple(o for o, _ in DEVICE_TESTS if o != old),
                         why="DFLASH's device test accepts the CPU") for old, new in DEVICE_TESTS))


def _model_dtype(runner, embeds):
    return embeds.to(runner.dtype)


def _embeds_patch() -> FunctionPatch:
    return FunctionPatch(
        name="cpu_harness.input_embeds_dtype", summary="input_embeds in the model's dtype, for every algorithm",
        alternatives=(Target("sglang.srt.model_executor.model_runner", "ModelRunner._extend_forward_kwargs"),),
        edits=(Edit(old='kwargs["input_embeds"] = forward_batch.input_embeds.bfloat16()',
                    new='kwargs["input_embeds"] = _sglang_spec_plugins_harness_embeds(self, forward_batch.input_embeds)',
                    fixed_markers=(), why="input_embeds in the model's dtype"),),
        injected={"_sglang_spec_plugins_harness_embeds": _model_dtype})


_LIBRARY = []  # the aten CPU kernel registration lives as long as the process


def serve_dflash_on_cpu() -> None:
    """Apply the stand-ins of the module doc (once per process, before the scheduler is made)."""
    import torch

    for patch in (_device_patch(), _embeds_patch()):
        plan = patch.plan(None)
        if plan.verdict == Verdict.REFUSED and patch.name.endswith("dflash_device"):
            continue  # 0.5.14-0.5.15 test no device
        patch.apply(None, plan)
    importlib.import_module("sglang.srt.speculative.dflash_worker_v2").is_hip = lambda: True
    if not _LIBRARY:
        library = torch.library.Library("aten", "IMPL")
        library.impl("record_stream", lambda tensor, stream: None, "CPU")
        _LIBRARY.append(library)
        torch.cpu.current_stream = lambda device=None: torch.Stream(device="cpu")
