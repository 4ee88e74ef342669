"""The triton attention backend (``TritonAttnBackend``): refuse a plugin width
it would ignore, and what it serves.

``__init__`` stores ``num_draft_tokens`` = ndt up to 0.5.20, and up to 0.5.16
every TARGET_VERIFY layout uses it. 0.5.17-0.5.20 lay a verify batch out
(eager, graph buffers at capture and replay, the captured metadata) at its
verify input's ``draft_token_num``, ndt only without one: the loader gives the
graph capture the plugin's verify input (``capture_input``), so both workers
take the width (read off those three methods: :func:`_reads_verify_input`).
From 0.5.21 ``target_verify_num_tokens_per_req =
model_runner.decode_num_tokens_per_req()``, the hook for both workers. So
:data:`TRITON` is needed up to 0.5.16 only, where it refuses a plugin width
other than ndt at start-up.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, FrozenSet, Optional

from ..engine.probe import method_source
from ..verify_layout import TREE
from .refusal import DRAFT, TARGET, NdtGuard
from .unit import Target

if TYPE_CHECKING:  # the start-up check's answer imports it
    from .support import Support

_MODULE = "sglang.srt.layers.attention.triton_backend"
_VERIFY_LAYOUTS = ("init_forward_metadata", "_update_target_verify_buffers", "_build_cuda_graph_forward_metadata")
"""The TritonAttnBackend methods that lay a TARGET_VERIFY batch out: eager;
the graph buffers, at capture and replay; the metadata a graph captures."""


def _flat(source: str) -> str:
    return re.sub(r"\s+", "", source)


def _reads_verify_input() -> bool:
    """Whether every TARGET_VERIFY layout of the installed TritonAttnBackend
    takes the width from the batch's verify input (``spec_info.draft_token_num``,
    ndt only without one): 0.5.17-0.5.20."""
    sources = [method_source(_MODULE, f"TritonAttnBackend.{name}") for name in _VERIFY_LAYOUTS]
    return all(s is not None and "=int(spec_info.draft_token_num)" in _flat(s) for s in sources)


def _ignored_workers(source: str) -> Optional[FrozenSet[bool]]:
    """Workers whose width the TritonAttnBackend of this ``__init__`` ignores; None: unknown shape."""
    s = _flat(source)
    if "self.target_verify_num_tokens_per_req=model_runner.decode_num_tokens_per_req()" in s:
        return frozenset()  # 0.5.21+: the hook, with the runner's is_draft_worker
    if re.search(r"self\.num_draft_tokens=(model_runner\.server_args|get_spec\(\))\.speculative_num_draft_tokens", s):
        return frozenset() if _reads_verify_input() else frozenset({TARGET, DRAFT})
    return None


TRITON = NdtGuard(name="backends.triton", summary="triton attention backend: refuse plugin widths it would ignore",
                  alternatives=(Target(_MODULE, "TritonAttnBackend.__init__"),),
                  backend="triton (TritonAttnBackend)", classify=_ignored_workers)

PATCHES = (TRITON,)


def support(width: int, ndt: int, verify_shape: str, is_draft_worker: bool) -> Support:
    """What a plugin verify gets from triton (see :func:`.support.attention_support`)."""
    from .support import CAPTURE, Serving, Support

    ignores = TRITON.ignored_workers()
    if width != ndt and (ignores is None or is_draft_worker in ignores):
        return Support(Serving.REFUSED, "lays TARGET_VERIFY out at speculative_num_draft_tokens (refused at start-up)")
    if verify_shape == TREE and width > ndt:
        return Support(Serving.REFUSED, "sizes its verify-mask buffer from speculative_num_draft_tokens: a wider tree "
                                        "mask overflows it")
    if verify_shape == TREE:
        return Support(Serving.PATCHED, f"reads the tree mask from the verify input; {CAPTURE}, without which replays "
                                        "run with no mask")
    return Support(Serving.SERVED, "takes the width from the algorithm or the batch's verify input; causal within the block")


SUPPORT = {"triton": support}
"""``--attention-backend`` names this module answers for."""
