"""The AMD aiter attention backend (``AiterAttnBackend``): TARGET_VERIFY width.

Non-MLA: the backend must lay a TARGET_VERIFY batch out at the batch's real
width, checked by ``verify_batch.batch_width`` (uniform, within the
algorithm's maximum). Releases that
instead take ``spec_info.draft_token_num`` (eager, up to 0.5.16 and 0.5.19) or
``speculative_num_draft_tokens`` (graph, up to 0.5.16; one ``seqused_k``, up to
0.5.16 and 0.5.19) are patched; the wrappers run the release's own code with
the width in place of the number it read, so every index array it builds
(``qo_indptr``, page table, ``max_q_len``) follows the width. Releases that
derive the width themselves (0.5.17, 0.5.18, 0.5.20+) floor a non-uniform
batch; ``aiter.eager_check`` checks the batch before their eager path.

MLA: the AITER MLA kernels take a fixed draft length (ndt) on every release,
so a plugin algorithm whose width differs from ndt is refused when the backend
is built, never computed silently wrong.
"""

from __future__ import annotations

import copy
import functools
import inspect
from typing import TYPE_CHECKING

from ..engine.algorithm import policy_of
from ..errors import EngineError
from ..verify_layout import CHAIN, TREE, width_of
from .refusal import refuse_other_width
from .source_edit import Edit
from .unit import FunctionPatch, Target, Verdict, WrapPatch
from .verify_batch import batch_width, checking

if TYPE_CHECKING:  # the start-up check's answers import it
    from .support import Support

MODULE = "sglang.srt.layers.attention.aiter_backend"
_WHERE = "aiter TARGET_VERIFY"


def _verify_width(backend, forward_batch):
    """The checked width of a TARGET_VERIFY batch (see verify_batch), None on
    other modes; None on MLA too, after the check (MLA keeps ndt)."""
    width = batch_width(forward_batch, backend.num_draft_tokens, _WHERE)
    return None if backend.use_mla else width


# -- eager: init_forward_metadata reads spec_info.draft_token_num -------------

_EAGER_DERIVED = "input_ids.shape[0] // bs"  # 0.5.17, 0.5.18, 0.5.20+


def _eager_condition(source):
    if _EAGER_DERIVED in source:
        return Verdict.NOT_NEEDED, "derives the non-MLA verify width from input_ids (aiter.eager_check checks it)"
    # one read on the MLA branch (fixed ndt, see MLA_REFUSAL), one on the non-MLA branch
    if source.count("draft_num = spec_info.draft_token_num") == 2:
        return Verdict.APPLY, "non-MLA TARGET_VERIFY takes its width from the batch, not spec_info.draft_token_num"
    return Verdict.REFUSED, "unknown TARGET_VERIFY shape (no spec_info.draft_token_num read on both branches, no derived width)"


def _eager_wrapper(original):
    @functools.wraps(original)
    def init_forward_metadata(self, forward_batch):
        width = _verify_width(self, forward_batch)
        spec_info = forward_batch.spec_info
        if width is None or getattr(spec_info, "draft_token_num", None) == width:
            return original(self, forward_batch)
        # the release reads draft_token_num only; hand it a copy carrying the width
        forward_batch.spec_info = copy.copy(spec_info)
        forward_batch.spec_info.draft_token_num = width
        try:
            return original(self, forward_batch)
        finally:
            forward_batch.spec_info = spec_info

    return init_forward_metadata


EAGER_WIDTH = WrapPatch(
    name="aiter.eager_width",
    summary="aiter non-MLA TARGET_VERIFY metadata (eager) at the batch's width",
    alternatives=(Target(MODULE, "AiterAttnBackend.init_forward_metadata"),),
    condition=_eager_condition,
    wrapper=_eager_wrapper,
)


def _eager_check_condition(source):
    if _EAGER_DERIVED in source:
        return Verdict.APPLY, ("divides the batch's tokens by its requests, flooring a non-uniform batch; "
                         "checks it is uniform and within the algorithm's maximum width first")
    if "draft_num = spec_info.draft_token_num" in source:
        return Verdict.NOT_NEEDED, "reads the width from spec_info (aiter.eager_width runs it at the checked batch width)"
    return Verdict.REFUSED, "unknown TARGET_VERIFY shape (no spec_info.draft_token_num read, no derived width)"


EAGER_CHECK = WrapPatch(
    name="aiter.eager_check",
    summary="aiter eager TARGET_VERIFY: refuse a non-uniform batch or a width above the maximum (0.5.17+)",
    alternatives=(Target(MODULE, "AiterAttnBackend.init_forward_metadata"),),
    condition=_eager_check_condition,
    wrapper=checking(lambda self: self.num_draft_tokens, _WHERE),
)


# -- graph: capture/replay metadata uses self.num_draft_tokens ---------------

def _graph_condition(source):
    if "verify_tokens_per_req" in source:
        return Verdict.NOT_NEEDED, "passes the batch's verify_tokens_per_req to the graph metadata"
    if "def init_forward_metadata_capture_cuda_graph" in source:
        return Verdict.NOT_NEEDED, "0.5.12.x graph capture is aiter.graph_width_capture's target"
    if "self._apply_cuda_graph_metadata(" in source:
        return Verdict.APPLY, "non-MLA TARGET_VERIFY graph metadata uses the batch's width, not speculative_num_draft_tokens"
    return Verdict.REFUSED, "unknown graph-metadata shape (neither _apply_cuda_graph_metadata nor verify_tokens_per_req)"


def _run_at_width(self, width, call):
    """``call()`` with ``self.num_draft_tokens`` (what the graph code reads as the width) set to ``width``."""
    if width is None:
        return call()
    ndt, self.num_draft_tokens = self.num_draft_tokens, width
    try:
        return call()
    finally:
        self.num_draft_tokens = ndt


def _graph_wrapper(original):
    @functools.wraps(original)
    def init_forward_metadata_out_graph(self, forward_batch, *args, **kwargs):
        width = _verify_width(self, forward_batch)
        return _run_at_width(self, width, lambda: original(self, forward_batch, *args, **kwargs))

    return init_forward_metadata_out_graph


GRAPH_WIDTH = WrapPatch(
    name="aiter.graph_width",
    summary="aiter non-MLA TARGET_VERIFY metadata (graph capture/replay, 0.5.13+) at the batch's width",
    alternatives=(Target(MODULE, "AiterAttnBackend.init_forward_metadata_out_graph"),
                  Target(MODULE, "AiterAttnBackend.init_forward_metadata_capture_cuda_graph")),  # 0.5.12.x
    condition=_graph_condition,
    wrapper=_graph_wrapper,
)

# 0.5.12.x: separate capture(bs, num_tokens, ...) and replay(bs, ...); replay
# has no token count, so it reuses the width its graph (same bs) was captured at.
CAPTURED_WIDTHS = "_sglang_spec_plugins_graph_widths"
"""Backend attribute (0.5.12.x): the width each batch size's graph was captured at."""


def _legacy_condition(source):
    if "def init_forward_metadata_out_graph" in source:
        return Verdict.NOT_NEEDED, "0.5.13+ graph metadata is aiter.graph_width's target"
    if "max_q_len = self.num_draft_tokens" in source:
        return Verdict.APPLY, "non-MLA TARGET_VERIFY graph metadata uses the captured width, not speculative_num_draft_tokens"
    return Verdict.REFUSED, "unknown graph-metadata shape (no max_q_len = self.num_draft_tokens)"


def _capture_wrapper(original):
    @functools.wraps(original)
    def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices, seq_lens, encoder_lens, forward_mode, spec_info):
        width = None
        if forward_mode.is_target_verify() and not self.use_mla:
            width = width_of(num_tokens, bs, where=f"{_WHERE} graph capture")
            vars(self).setdefault(CAPTURED_WIDTHS, {})[bs] = width
        return _run_at_width(self, width, lambda: original(
            self, bs, num_tokens, req_pool_indices, seq_lens, encoder_lens, forward_mode, spec_info))

    return init_forward_metadata_capture_cuda_graph


def _replay_wrapper(original):
    @functools.wraps(original)
    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens, forward_mode, *args, **kwargs):
        width = vars(self).get(CAPTURED_WIDTHS, {}).get(bs) if forward_mode.is_target_verify() else None
        return _run_at_width(self, width, lambda: original(
            self, bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens, forward_mode, *args, **kwargs))

    return init_forward_metadata_replay_cuda_graph


def _legacy_patch(method, wrapper):
    return WrapPatch(
        name=f"aiter.graph_width_{method}",
        summary=f"aiter non-MLA TARGET_VERIFY graph {method} (0.5.12.x) at the captured width",
        alternatives=(Target(MODULE, f"AiterAttnBackend.init_forward_metadata_{method}_cuda_graph"),
                      Target(MODULE, "AiterAttnBackend.init_forward_metadata_out_graph")),  # 0.5.13+
        condition=_legacy_condition,
        wrapper=wrapper,
    )


GRAPH_CAPTURE_0512 = _legacy_patch("capture", _capture_wrapper)
GRAPH_REPLAY_0512 = _legacy_patch("replay", _replay_wrapper)


# -- graph: the default verify path reads the worker's custom mask ----------
# Without SGLANG_USE_AITER_UNIFIED_ATTN, aiter verifies through SGLang's Triton
# extend_attention_fwd with a custom mask, and its graph metadata (capture and
# replay) copies ``spec_info.custom_mask`` into the graph's mask buffer: a
# chain worker that sends no mask (it need not: eager, the kernel is causal
# without one) crashed the first replay with AttributeError ('NoneType' object
# has no attribute 'shape'). For a plugin chain the wrapper hands the release
# the causal chain mask of the verified width instead.

_MASK_READ = "custom_mask[: spec_info.custom_mask.shape[0]]"


def causal_chain_mask(prefix_lengths, width: int, device) -> "torch.Tensor":
    """The flattened custom mask of a causal chain, as the Triton extend kernel
    reads it: per request ``width`` rows of ``prefix + width`` columns, the
    prefix visible to every row, row j seeing new tokens 0..j."""
    import torch

    chain = torch.ones(width, width, dtype=torch.bool).tril()
    parts = [torch.cat((torch.ones(width, int(p), dtype=torch.bool), chain), 1).reshape(-1) for p in prefix_lengths]
    return torch.cat(parts).to(device) if parts else torch.zeros(0, dtype=torch.bool, device=device)


def _chain_mask_condition(source):
    if _MASK_READ in source or "self._apply_cuda_graph_metadata(" in source:
        return Verdict.APPLY, ("the default (non-unified) verify graph metadata copies the worker's custom mask; a plugin "
                         "chain whose worker sends none gets the causal chain mask of its width")
    return Verdict.REFUSED, "unknown graph-metadata shape (no spec_info.custom_mask copy, no _apply_cuda_graph_metadata)"


_ALGORITHM = "_sglang_spec_plugins_algorithm"
"""Attribute aiter.algorithm sets on each backend: its model runner's spec algorithm."""


def _record_algorithm_wrapper(original):
    @functools.wraps(original)
    def __init__(self, model_runner, *args, **kwargs):
        original(self, model_runner, *args, **kwargs)
        vars(self)[_ALGORITHM] = getattr(model_runner, "spec_algorithm", None)

    return __init__


RECORD_ALGORITHM = WrapPatch(
    name="aiter.algorithm",
    summary="aiter: each backend remembers its worker's speculative algorithm (the 0.5.12.x graph metadata gets none)",
    alternatives=(Target(MODULE, "AiterAttnBackend.__init__"),),
    condition=lambda source: ((Verdict.APPLY, "records the model runner's spec_algorithm for aiter.chain_mask")
                              if "model_runner" in source else (Verdict.REFUSED, "unknown constructor shape (no model_runner)")),
    wrapper=_record_algorithm_wrapper,
)


def _plugin_chain(backend, forward_mode, spec_info) -> bool:
    """Whether this graph metadata call is a plugin chain's TARGET_VERIFY on the
    default path without a custom mask; EngineError for such a tree."""
    if not (forward_mode.is_target_verify() and not backend.use_mla and not getattr(backend, "_use_unified_verify", False)
            and spec_info is not None and getattr(spec_info, "custom_mask", 0) is None):
        return False
    algorithm = vars(backend).get(_ALGORITHM)
    policy = policy_of(algorithm)
    if policy is None:
        return False
    if algorithm.verify_shape != CHAIN:
        raise EngineError(f"aiter TARGET_VERIFY graph: algorithm {policy.algorithm} (plugin {policy.plugin!r}) declares "
                          "verify_shape='tree' but its verify input carries no custom mask; a tree worker must send "
                          "its mask (spec_info.custom_mask)")
    return True


def _with_mask(spec_info, prefix_lengths, width, device):
    masked = copy.copy(spec_info)
    masked.custom_mask = causal_chain_mask(prefix_lengths, width, device)
    return masked


def _chain_mask_wrapper(original):
    @functools.wraps(original)
    def init_forward_metadata_out_graph(self, forward_batch, *args, **kwargs):
        spec_info = forward_batch.spec_info
        if not _plugin_chain(self, forward_batch.forward_mode, spec_info):
            return original(self, forward_batch, *args, **kwargs)
        width = batch_width(forward_batch, self.num_draft_tokens, f"{_WHERE} graph")
        seq_lens = forward_batch.seq_lens_cpu if forward_batch.seq_lens_cpu is not None else forward_batch.seq_lens.cpu()
        forward_batch.spec_info = _with_mask(spec_info, seq_lens[: forward_batch.batch_size].tolist(), width, forward_batch.seq_lens.device)
        try:
            return original(self, forward_batch, *args, **kwargs)
        finally:
            forward_batch.spec_info = spec_info

    return init_forward_metadata_out_graph


def _chain_mask_wrapper_0512(original):
    """0.5.12.x: capture(bs, num_tokens, ...) and replay(bs, ...) take spec_info
    and no algorithm (aiter.algorithm recorded it); the width is the
    captured one (see CAPTURED_WIDTHS)."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        a = bound.arguments
        if not _plugin_chain(self, a["forward_mode"], a["spec_info"]):
            return original(*bound.args, **bound.kwargs)
        bs = a["bs"]
        width = a["num_tokens"] // bs if "num_tokens" in a else vars(self).get(CAPTURED_WIDTHS, {}).get(bs, self.num_draft_tokens)
        seq_lens = a.get("seq_lens_cpu")
        seq_lens = (seq_lens if seq_lens is not None else a["seq_lens"].cpu())[:bs].tolist()
        a["spec_info"] = _with_mask(a["spec_info"], seq_lens, width, a["seq_lens"].device)
        return original(*bound.args, **bound.kwargs)

    return wrapper


CHAIN_MASK = WrapPatch(
    name="aiter.chain_mask",
    summary="aiter default TARGET_VERIFY graph (capture/replay): a plugin chain without a custom mask gets the causal chain mask",
    alternatives=(Target(MODULE, "AiterAttnBackend.init_forward_metadata_out_graph"),  # 0.5.13+
                  Target(MODULE, "AiterAttnBackend.init_forward_metadata_replay_cuda_graph")),  # 0.5.12.x
    condition=_chain_mask_condition,
    wrapper=lambda original: (_chain_mask_wrapper(original) if "forward_batch" in inspect.signature(original).parameters
                              else _chain_mask_wrapper_0512(original)),
)

CHAIN_MASK_CAPTURE_0512 = WrapPatch(
    name="aiter.chain_mask_capture",
    summary="aiter default TARGET_VERIFY graph capture (0.5.12.x): a chain without a custom mask gets the causal chain mask",
    alternatives=(Target(MODULE, "AiterAttnBackend.init_forward_metadata_capture_cuda_graph"),
                  Target(MODULE, "AiterAttnBackend.init_forward_metadata_out_graph")),  # 0.5.13+: aiter.chain_mask
    condition=lambda source: ((Verdict.NOT_NEEDED, "0.5.13+ graph metadata is aiter.chain_mask's target")
                              if "def init_forward_metadata_out_graph" in source else _chain_mask_condition(source)),
    wrapper=_chain_mask_wrapper_0512,
)


# -- forward_extend: the unified verify kernel's key lengths -----------------

SEQUSED_K = FunctionPatch(
    name="aiter.seqused_k",
    summary="aiter unified TARGET_VERIFY: key lengths follow max_q_len",
    alternatives=(Target(MODULE, "AiterAttnBackend.forward_extend"),),
    edits=(
        Edit(
            old="seqused_k=forward_batch.seq_lens + self.num_draft_tokens,",
            new="seqused_k=forward_batch.seq_lens + self.forward_metadata.max_q_len,",
            fixed_markers=("forward_batch.seq_lens + self.forward_metadata.max_q_len",),
            why="adds the verify width (max_q_len) to the prefix lengths for seqused_k",
        ),
    ),
)


# -- MLA: refuse a plugin width other than ndt --------------------------------

def _mla_condition(source):
    if "self.use_mla" in source and "num_draft_tokens" in source:
        return Verdict.APPLY, "refuses a plugin verify width other than speculative_num_draft_tokens on MLA"
    return Verdict.REFUSED, "unknown constructor shape (no use_mla / num_draft_tokens)"


def _mla_wrapper(original):
    @functools.wraps(original)
    def __init__(self, model_runner, *args, **kwargs):
        original(self, model_runner, *args, **kwargs)
        if self.use_mla and self.num_draft_tokens:
            refuse_other_width("aiter (AiterAttnBackend)", model_runner, self.num_draft_tokens,
                               "on an MLA model supports only the fixed draft length "
                               f"speculative_num_draft_tokens={self.num_draft_tokens}")

    return __init__


MLA_REFUSAL = WrapPatch(
    name="aiter.mla_refusal",
    summary="aiter MLA: refuse at start-up a plugin width other than speculative_num_draft_tokens",
    alternatives=(Target(MODULE, "AiterAttnBackend.__init__"),),
    condition=_mla_condition,
    wrapper=_mla_wrapper,
)

PATCHES = (EAGER_WIDTH, EAGER_CHECK, GRAPH_WIDTH, GRAPH_CAPTURE_0512, GRAPH_REPLAY_0512, RECORD_ALGORITHM, CHAIN_MASK,
           CHAIN_MASK_CAPTURE_0512,
           SEQUSED_K, MLA_REFUSAL)


def support(width: int, ndt: int, verify_shape: str, is_draft_worker: bool) -> Support:
    """What a plugin verify gets from aiter on a non-MLA model (see :func:`.attention_support.attention_support`)."""
    from .support import CAPTURE, Serving, Support, any_applies

    if width != ndt and any_applies([p for p in PATCHES if p is not MLA_REFUSAL]):
        return Support(Serving.PATCHED, f"non-MLA width patched to the batch's (aiter); {CAPTURE}")
    tree = verify_shape == TREE
    return Support(Serving.PATCHED if tree else Serving.SERVED,
                   "non-MLA: takes the width from the batch" + (f"; {CAPTURE}" if tree else ""))


def mla_support(width: int, ndt: int, verify_shape: str, is_draft_worker: bool) -> Support:
    """What a plugin verify gets from aiter on an MLA model."""
    from .support import EAGLE_TREE_ONLY, Serving, Support

    if width != ndt:
        return Support(Serving.REFUSED, "the AITER MLA kernels take a fixed draft length (refused at start-up)")
    if verify_shape == TREE:
        return Support(Serving.REFUSED, EAGLE_TREE_ONLY)
    return Support(Serving.SERVED, "SGLang's own layout at speculative_num_draft_tokens")


SUPPORT = {"aiter": support, "aiter_mla": mla_support}
"""``--attention-backend`` names this module answers for (``aiter_mla``: aiter on an MLA model)."""
