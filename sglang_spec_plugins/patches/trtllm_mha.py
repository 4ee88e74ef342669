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

On SM90/SM120 (0.5.21+) the uniform verify runs on flashinfer's XQA kernel
with a causal mask ``__init__`` builds for ndt rows per request; the kernel
reads it as ``q_len_per_req`` rows per request, so at another width every
request after the first gets another request's rows. ``xqa_mask`` passes the
mask of the verified width (``verify_layout.packed_causal_mask``). Before
0.5.21 the verify passes XQA no mask at all, and flashinfer's ``xqa`` asserts
one for more than one token per request: :func:`unmasked_xqa_verify` says why
:func:`support` refuses that combination at start-up.

From 0.5.13 the eager path derives the width as ``tokens // requests``, which
floors a non-uniform batch; ``eager_check`` checks the batch first
(``verify_batch.batch_width``: uniform, within the algorithm's maximum).

Where the width equals ndt (every built-in algorithm) the wrappers call the
original unchanged. Each patch lists the function's location in both shapes
so that it resolves on every release and says "not needed" on the other one.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
from typing import TYPE_CHECKING, Optional, Tuple

from ..errors import EngineError
from ..verify_layout import TREE, packed_causal_mask, qo_indptr, width_of
from .unit import Target, Verdict, WrapPatch
from .verify_batch import batch_width, checking

if TYPE_CHECKING:  # the start-up check's answer imports it
    from .support import Support

_MODULE = "sglang.srt.layers.attention.trtllm_mha_backend"
_CLASS = "TRTLLMHAAttnBackend"

# Source markers of each shape.
_HARD_CODED = "metadata.max_seq_len_q = self.speculative_num_draft_tokens"  # <= 0.5.12.post1
_DERIVED = "num_tokens // bs"  # 0.5.13+ capture: width from the captured shape
_PRESET_Q = 'self.target_verify_metadata["cu_seqlens_q"]'  # 0.5.13+: the stride-ndt preset
_EAGER_DERIVED = "forward_batch.input_ids.shape[0] // batch_size"  # 0.5.13+ eager
_REPLAY_DERIVED = ("seqlen_offset = metadata.max_seq_len_q", "seq_lens + metadata.max_seq_len_q")


_EAGER_WHERE = "trtllm_mha TARGET_VERIFY eager"


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


def _argument_reader(original):
    """``read(args, kwargs, name)``: an argument of a call to the method
    ``original`` (``args`` without self), its position looked up once here
    rather than binding the signature on every call (a replay runs every step)."""
    position = {name: i for i, name in enumerate(list(inspect.signature(original).parameters)[1:])}

    def read(args, kwargs, name):
        return kwargs[name] if name in kwargs else args[position[name]]

    return read


def _target_verify_wrapper(width_for):
    """A wrapper builder: for TARGET_VERIFY, run the original with the width
    ``width_for(backend, arg)`` in place of ndt (``arg(name)``: the call's argument)."""

    def wrapper(original):
        read = _argument_reader(original)
        batch_arg = "forward_batch" in inspect.signature(original).parameters

        @functools.wraps(original)
        def patched(self, *args, **kwargs):
            mode = read(args, kwargs, "forward_batch").forward_mode if batch_arg else read(args, kwargs, "forward_mode")
            if not mode.is_target_verify():
                return original(self, *args, **kwargs)
            with _width_as_ndt(self, width_for(self, lambda name: read(args, kwargs, name))):
                return original(self, *args, **kwargs)

        return patched

    return wrapper


def _legacy_condition(fixed_markers: Tuple[str, ...], fixed_why: str):
    def condition(source: str) -> Tuple[str, str]:
        if _HARD_CODED in source:
            return Verdict.APPLY, "reads the TARGET_VERIFY width from speculative_num_draft_tokens; runs it at the batch width"
        if any(marker in source for marker in fixed_markers):
            return Verdict.NOT_NEEDED, fixed_why
        return Verdict.REFUSED, "unknown shape: neither the hard-coded width nor a derived one"

    return condition


FIXED_WIDTH_CAPTURE = WrapPatch(
    name="trtllm_mha.fixed_width_capture",
    summary="trtllm_mha CUDA-graph capture at the captured width (<= 0.5.12.post1)",
    alternatives=(_target("init_forward_metadata_capture_cuda_graph"), _target("_build_cuda_graph_metadata")),
    condition=_legacy_condition((_DERIVED,), "derives the width from the captured shape"),
    wrapper=_target_verify_wrapper(
        lambda self, arg: width_of(arg("num_tokens"), arg("bs"), where="trtllm_mha TARGET_VERIFY capture")
    ),
)

FIXED_WIDTH_REPLAY = WrapPatch(
    name="trtllm_mha.fixed_width_replay",
    summary="trtllm_mha CUDA-graph replay at the captured width (<= 0.5.12.post1)",
    alternatives=(_target("init_forward_metadata_replay_cuda_graph"), _target("_apply_cuda_graph_metadata")),
    condition=_legacy_condition(_REPLAY_DERIVED, "takes the width from the captured metadata"),
    # A replay carries no token count: the graph replays the width it was
    # captured at, which the (patched) capture stored as max_seq_len_q.
    wrapper=_target_verify_wrapper(lambda self, arg: self.target_verify_metadata[arg("bs")].max_seq_len_q),
)

FIXED_WIDTH_EAGER = WrapPatch(
    name="trtllm_mha.fixed_width_eager",
    summary="trtllm_mha eager TARGET_VERIFY metadata at the batch width (<= 0.5.12.post1)",
    alternatives=(_target("init_forward_metadata"),),
    condition=_legacy_condition((_EAGER_DERIVED,), "derives the width from the batch (trtllm_mha.eager_check checks it)"),
    wrapper=_target_verify_wrapper(
        lambda self, arg: batch_width(arg("forward_batch"), self.speculative_num_draft_tokens, _EAGER_WHERE)
    ),
)


def _eager_check_condition(source: str) -> Tuple[str, str]:
    if _EAGER_DERIVED in source:
        return Verdict.APPLY, ("divides the batch's tokens by its requests, flooring a non-uniform batch; "
                         "checks it is uniform and within the algorithm's maximum width first")
    if _HARD_CODED in source:
        return Verdict.NOT_NEEDED, "reads the width from ndt (trtllm_mha.fixed_width_eager runs it at the checked batch width)"
    return Verdict.REFUSED, "unknown shape: neither the hard-coded width nor a derived one"


EAGER_CHECK = WrapPatch(
    name="trtllm_mha.eager_check",
    summary="trtllm_mha eager TARGET_VERIFY: refuse a non-uniform batch or a width above the maximum (0.5.13+)",
    alternatives=(_target("init_forward_metadata"),),
    condition=_eager_check_condition,
    wrapper=checking(lambda self: self.speculative_num_draft_tokens, _EAGER_WHERE),
)


def _cu_seqlens_q_condition(source: str) -> Tuple[str, str]:
    if _PRESET_Q in source and _DERIVED in source:
        return Verdict.APPLY, "captures max_seq_len_q at the captured width but slices cu_seqlens_q from a stride-ndt preset"
    if _HARD_CODED in source:
        return Verdict.NOT_NEEDED, "builds cu_seqlens_q at each capture (its width: trtllm_mha.fixed_width_capture)"
    if _DERIVED in source:
        return Verdict.NOT_NEEDED, "no longer slices cu_seqlens_q from the stride-ndt preset"
    return Verdict.REFUSED, "unknown shape of the TARGET_VERIFY capture metadata"


def _cu_seqlens_q_wrapper(original):
    import torch

    read = _argument_reader(original)

    @functools.wraps(original)
    def build(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if read(args, kwargs, "forward_mode").is_target_verify():
            bs = read(args, kwargs, "bs")
            metadata = self.target_verify_metadata[bs]
            # Ragged verify (0.5.16+) writes cu_seqlens_q itself at every capture and replay.
            if not getattr(metadata, "is_ragged_verify", False):
                width = width_of(read(args, kwargs, "num_tokens"), bs, where="trtllm_mha TARGET_VERIFY capture")
                if width != self.speculative_num_draft_tokens:
                    arange = functools.partial(torch.arange, dtype=torch.int32, device=metadata.cu_seqlens_q.device)
                    metadata.cu_seqlens_q = qo_indptr(bs, width, arange)
        return result

    return build


GRAPH_CU_SEQLENS_Q = WrapPatch(
    name="trtllm_mha.graph_cu_seqlens_q",
    summary="trtllm_mha CUDA-graph cu_seqlens_q at the captured width (0.5.13+)",
    alternatives=(_target("_build_cuda_graph_metadata"), _target("init_forward_metadata_capture_cuda_graph")),
    condition=_cu_seqlens_q_condition,
    wrapper=_cu_seqlens_q_wrapper,
)

# -- SM90/SM120 (XQA): the spec-decode mask at the verified width ------------

_MASK_SLICE = 'kwargs["mask"] = mask[: group_seq_lens.shape[0]]'
_MASKS = "_sglang_spec_plugins_xqa_masks"


_PASSES_MASK = r"[(,]\s*mask\s*="  # a call given mask=... (compiled where planning or the check searches)


def _xqa_mask_condition(source: str) -> Tuple[str, str]:
    if _MASK_SLICE in source:
        return Verdict.APPLY, ("hands XQA the causal mask built in __init__ for ndt rows per request, which the kernel "
                         "reads as q_len_per_req rows per request; passes the mask of the verified width")
    if not re.search(_PASSES_MASK, source):  # forward_extend before _run_fixed_q_len_decode, or one without a mask
        return Verdict.NOT_NEEDED, ("passes XQA no spec-decode mask (before 0.5.21); on SM90/SM120 a verify of more than "
                              "one token per request is refused at start-up")
    return Verdict.REFUSED, "unknown shape of the XQA fixed-q-len decode call"


def verify_passes_xqa_mask() -> bool:
    """Whether the installed release's uniform TARGET_VERIFY hands the decode
    kernel a spec-decode mask: its ``forward_extend`` calls with ``mask=``
    (0.5.21+, built in ``__init__``); False also where it cannot be read."""
    return bool(re.search(_PASSES_MASK, _target("forward_extend").source() or ""))


def xqa_gpu() -> Optional[str]:
    """This machine's GPU architecture where trtllm_mha runs on flashinfer's XQA
    kernel, decided as the release's ``__init__`` sets ``is_xqa_impl``: SGLang's
    own ``is_sm90_supported() or is_sm120_supported()`` (``sglang.srt.utils.common``;
    read directly up to 0.5.18, through ``get_platform()`` from 0.5.19). None
    elsewhere (SM100 runs trtllm-gen, which needs no mask)."""
    from sglang.srt.utils import common

    if common.is_sm90_supported():
        return "SM90 (Hopper)"
    return "SM120 (Blackwell)" if common.is_sm120_supported() else None


def unmasked_xqa_verify(width: int) -> Optional[str]:
    """Why a TARGET_VERIFY of ``width`` tokens per request cannot run through
    trtllm_mha on this machine, or None: on an XQA GPU with a release that
    passes no spec-decode mask, flashinfer's ``xqa`` asserts one whenever
    ``q_len_per_req > 1`` (every pin of 0.5.12-0.5.20, flashinfer
    0.6.11.post1-0.6.18), deep inside the first verify step."""
    if width <= 1 or verify_passes_xqa_mask():
        return None
    gpu = xqa_gpu()
    if gpu is None:
        return None
    return (f"runs TARGET_VERIFY on this {gpu} GPU through flashinfer's XQA kernel, which needs a spec-decode "
            "mask for more than one token per request, and this release passes none (flashinfer would stop the "
            "first verify step, after the weights load: 'Mask is required for speculative decoding'); choose "
            "another --attention-backend (flashinfer serves plugin algorithms on every release) or SGLang "
            "0.5.21+, whose trtllm_mha passes the mask")


def _xqa_mask(backend, like, width: int):
    """The batch mask (``like``'s requests) for ``width`` new tokens per request,
    built once per width and kept, so a CUDA graph captured with it reads it at
    every replay. Built on the first forward at that width: the graph runners
    run each forward twice before capturing it (a host-to-device copy cannot
    be captured)."""
    import torch

    masks = vars(backend).setdefault(_MASKS, {})
    if width not in masks:
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise EngineError(f"trtllm_mha XQA: the spec-decode mask for width {width} was first needed inside a "
                              "CUDA-graph capture; it must be built by a forward before the capture")
        block = torch.tensor(packed_causal_mask(width), dtype=torch.int32).to(torch.uint16)
        masks[width] = block.unsqueeze(0).expand(like.shape[0], -1, -1).contiguous().to(like.device)
    return masks[width]


def _xqa_mask_wrapper(original):
    @functools.wraps(original)
    def _run_fixed_q_len_decode(self, *args, **kwargs):
        mask = kwargs.get("mask")
        if mask is not None and mask.shape[1] != kwargs.get("q_len_per_req", 1):
            kwargs["mask"] = _xqa_mask(self, mask, kwargs["q_len_per_req"])
        return original(self, *args, **kwargs)

    return _run_fixed_q_len_decode


XQA_MASK = WrapPatch(
    name="trtllm_mha.xqa_mask",
    summary="trtllm_mha on SM90/SM120 (XQA, 0.5.21+): the spec-decode causal mask at the verified width",
    alternatives=(_target("_run_fixed_q_len_decode"), _target("forward_extend")),
    condition=_xqa_mask_condition,
    wrapper=_xqa_mask_wrapper,
)

PATCHES = (FIXED_WIDTH_CAPTURE, FIXED_WIDTH_REPLAY, FIXED_WIDTH_EAGER, EAGER_CHECK, GRAPH_CU_SEQLENS_Q, XQA_MASK)


def support(width: int, ndt: int, verify_shape: str, is_draft_worker: bool) -> Support:
    """What a plugin verify gets from trtllm_mha (see :func:`.attention_support.attention_support`)."""
    from .support import Serving, Support, any_applies

    if verify_shape == TREE:
        return Support(Serving.REFUSED, "applies a causal mask only: it cannot verify a tree")
    unmasked = unmasked_xqa_verify(width)
    if unmasked:
        return Support(Serving.REFUSED, unmasked)
    xqa = "" if width <= 1 or verify_passes_xqa_mask() else \
        " (on this machine; on an SM90/SM120 GPU refused at start-up: this release passes XQA no spec-decode mask)"
    if width != ndt and any_applies(PATCHES):
        return Support(Serving.PATCHED, "per-request width patched to the batch's on eager, capture and replay "
                                        "(trtllm_mha)" + xqa)
    return Support(Serving.SERVED, "takes the width from the batch" + xqa)


SUPPORT = {"trtllm_mha": support}
"""``--attention-backend`` names this module answers for."""


def xqa_report() -> str:
    """For ``doctor``: whether trtllm_mha on an XQA GPU takes a verify of more than one token."""
    return ("supported (the XQA spec-decode mask is passed)" if verify_passes_xqa_mask() else
            "refused for widths > 1 (no XQA spec-decode mask)")
