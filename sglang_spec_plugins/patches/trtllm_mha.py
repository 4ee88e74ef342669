"""trtllm_mha (NVIDIA) TARGET_VERIFY metadata at the batch's real width.

Two release shapes are wrong for a width other than ``speculative_num_draft_tokens``
(ndt):

* up to 0.5.12.post1, CUDA-graph capture, replay and the eager path read the
  per-request width from ``self.speculative_num_draft_tokens`` in every
  TARGET_VERIFY line (key lengths, ``cu_seqlens_q``, ``max_seq_len_q/k``).
  The ``fixed_width_*`` patches run those functions with that attribute set to
  the batch's width (and nothing else in them reads it);
* from 0.5.13 capture derives ``max_seq_len_q`` (and with it the key lengths)
  from the captured shape, but slices ``cu_seqlens_q`` from a preset built
  once in ``init_cuda_graph_state`` with stride ndt. ``graph_cu_seqlens_q``
  replaces it, at capture, with the offsets of the captured width.

Where the width equals ndt (every built-in algorithm) the wrappers call the
original unchanged. Each patch lists the function's location in both shapes
so that it resolves on every release and says "not needed" on the other one.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Tuple

from ..verify_layout import qo_indptr, width_of
from .unit import Target, WrapPatch

_MODULE = "sglang.srt.layers.attention.trtllm_mha_backend"
_CLASS = "TRTLLMHAAttnBackend"

# Source markers of each shape.
_HARD_CODED = "metadata.max_seq_len_q = self.speculative_num_draft_tokens"  # <= 0.5.12.post1
_DERIVED = "num_tokens // bs"  # 0.5.13+ capture: width from the captured shape
_PRESET_Q = 'self.target_verify_metadata["cu_seqlens_q"]'  # 0.5.13+: the stride-ndt preset
_REPLAY_DERIVED = ("seqlen_offset = metadata.max_seq_len_q", "seq_lens + metadata.max_seq_len_q")


def _target(method: str) -> Target:
    return Target(_MODULE, f"{_CLASS}.{method}")


@contextlib.contextmanager
def _width_as_ndt(backend, width: int):
    """Run a <= 0.5.12.post1 metadata function at ``width`` (see module doc)."""
    ndt = backend.speculative_num_draft_tokens
    backend.speculative_num_draft_tokens = width
    try:
        yield
    finally:
        backend.speculative_num_draft_tokens = ndt


def _target_verify_wrapper(width_for):
    """A wrapper builder: for TARGET_VERIFY, run the original with the width
    ``width_for(backend, arguments)`` in place of ndt."""

    def wrapper(original):
        signature = inspect.signature(original)

        @functools.wraps(original)
        def patched(self, *args, **kwargs):
            arguments = signature.bind(self, *args, **kwargs).arguments
            mode = arguments["forward_batch"].forward_mode if "forward_batch" in arguments else arguments["forward_mode"]
            if not mode.is_target_verify():
                return original(self, *args, **kwargs)
            with _width_as_ndt(self, width_for(self, arguments)):
                return original(self, *args, **kwargs)

        return patched

    return wrapper


def _legacy_condition(fixed_markers: Tuple[str, ...], fixed_why: str):
    def condition(source: str) -> Tuple[str, str]:
        if _HARD_CODED in source:
            return "apply", "reads the TARGET_VERIFY width from speculative_num_draft_tokens; runs it at the batch width"
        if any(marker in source for marker in fixed_markers):
            return "not needed", fixed_why
        return "refused", "unknown shape: neither the hard-coded width nor a derived one"

    return condition


FIXED_WIDTH_CAPTURE = WrapPatch(
    name="trtllm_mha.fixed_width_capture",
    summary="trtllm_mha CUDA-graph capture at the captured width (<= 0.5.12.post1)",
    alternatives=(_target("init_forward_metadata_capture_cuda_graph"), _target("_build_cuda_graph_metadata")),
    condition=_legacy_condition((_DERIVED,), "derives the width from the captured shape"),
    wrapper=_target_verify_wrapper(
        lambda self, a: width_of(a["num_tokens"], a["bs"], where="trtllm_mha TARGET_VERIFY capture")
    ),
)

FIXED_WIDTH_REPLAY = WrapPatch(
    name="trtllm_mha.fixed_width_replay",
    summary="trtllm_mha CUDA-graph replay at the captured width (<= 0.5.12.post1)",
    alternatives=(_target("init_forward_metadata_replay_cuda_graph"), _target("_apply_cuda_graph_metadata")),
    condition=_legacy_condition(_REPLAY_DERIVED, "takes the width from the captured metadata"),
    # A replay carries no token count: the graph replays the width it was
    # captured at, which the (patched) capture stored as max_seq_len_q.
    wrapper=_target_verify_wrapper(lambda self, a: self.target_verify_metadata[a["bs"]].max_seq_len_q),
)

FIXED_WIDTH_EAGER = WrapPatch(
    name="trtllm_mha.fixed_width_eager",
    summary="trtllm_mha eager TARGET_VERIFY metadata at the batch width (<= 0.5.12.post1)",
    alternatives=(_target("init_forward_metadata"),),
    condition=_legacy_condition(("forward_batch.input_ids.shape[0] // batch_size",), "derives the width from the batch"),
    wrapper=_target_verify_wrapper(
        lambda self, a: width_of(a["forward_batch"].input_ids.shape[0], a["forward_batch"].batch_size,
                                 where="trtllm_mha TARGET_VERIFY eager")
    ),
)


def _cu_seqlens_q_condition(source: str) -> Tuple[str, str]:
    if _PRESET_Q in source and _DERIVED in source:
        return "apply", "captures max_seq_len_q at the captured width but slices cu_seqlens_q from a stride-ndt preset"
    if _HARD_CODED in source:
        return "not needed", "builds cu_seqlens_q at each capture (its width: trtllm_mha.fixed_width_capture)"
    if _DERIVED in source:
        return "not needed", "no longer slices cu_seqlens_q from the stride-ndt preset"
    return "refused", "unknown shape of the TARGET_VERIFY capture metadata"


def _cu_seqlens_q_wrapper(original):
    import torch

    signature = inspect.signature(original)

    @functools.wraps(original)
    def build(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        a = signature.bind(self, *args, **kwargs).arguments
        if a["forward_mode"].is_target_verify():
            metadata = self.target_verify_metadata[a["bs"]]
            # Ragged verify (0.5.16+) writes cu_seqlens_q itself at every capture and replay.
            if not getattr(metadata, "is_ragged_verify", False):
                width = width_of(a["num_tokens"], a["bs"], where="trtllm_mha TARGET_VERIFY capture")
                if width != self.speculative_num_draft_tokens:
                    arange = functools.partial(torch.arange, dtype=torch.int32, device=metadata.cu_seqlens_q.device)
                    metadata.cu_seqlens_q = qo_indptr(a["bs"], width, arange)
        return result

    return build


GRAPH_CU_SEQLENS_Q = WrapPatch(
    name="trtllm_mha.graph_cu_seqlens_q",
    summary="trtllm_mha CUDA-graph cu_seqlens_q at the captured width (0.5.13+)",
    alternatives=(_target("_build_cuda_graph_metadata"), _target("init_forward_metadata_capture_cuda_graph")),
    condition=_cu_seqlens_q_condition,
    wrapper=_cu_seqlens_q_wrapper,
)

PATCHES = (FIXED_WIDTH_CAPTURE, FIXED_WIDTH_REPLAY, FIXED_WIDTH_EAGER, GRAPH_CU_SEQLENS_Q)
