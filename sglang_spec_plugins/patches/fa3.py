"""The FA3/FA4 attention backend (``FlashAttentionBackend``): refuse a plugin
width it would ignore, and what it serves.

Its ``__init__`` stores the TARGET_VERIFY tokens per request and lays every
verify batch out (``qo_indptr``, ``max_seq_len_q``, graph buffers) from it:
``speculative_num_draft_tokens`` = ndt up to 0.5.15; from 0.5.16 the draft
worker's comes from the width hook, the target worker's stays ndt
(0.5.16-0.5.23). Storing the width instead would be a one-line edit, but not a
safe one: the same attribute sizes EAGLE's buffers. So :data:`FA3` refuses,
at start-up, a plugin width other than ndt on a worker it lays out at ndt.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, FrozenSet, Optional

from ..verify_layout import TREE
from .refusal import DRAFT, TARGET, WHO, NdtGuard
from .unit import Target

if TYPE_CHECKING:  # the start-up check's answer imports it
    from .support import Support


def _ignored_workers(source: str) -> Optional[FrozenSet[bool]]:
    """Workers whose width this ``FlashAttentionBackend.__init__`` ignores; None: unknown shape."""
    s = re.sub(r"\s+", "", source)
    if "decode_num_tokens_per_req(" in s or "is_draft_worker=model_runner.is_draft_worker" in s:
        return frozenset()  # the hook for every worker
    stores_ndt = re.search(r"self\.speculative_num_draft_tokens=\(?(model_runner\.server_args|get_spec\(\))\."
                           r"speculative_num_draft_tokens\)?", s)
    if not stores_ndt:
        return None
    if "andmodel_runner.is_draft_worker" in s and "is_draft_worker=True" in s:  # 0.5.16+: the hook for the draft worker
        return frozenset({TARGET})
    return frozenset({TARGET, DRAFT})


FA3 = NdtGuard(name="backends.fa3", summary="FA3/FA4 attention backend: refuse plugin widths it would ignore",
               alternatives=(Target("sglang.srt.layers.attention.flashattention_backend", "FlashAttentionBackend.__init__"),),
               backend="FA3/FA4 (FlashAttentionBackend)", classify=_ignored_workers)

PATCHES = (FA3,)


def support(width: int, ndt: int, verify_shape: str, is_draft_worker: bool) -> Support:
    """What a plugin verify gets from FA3/FA4 (see :func:`.support.attention_support`)."""
    from .support import EAGLE_TREE_ONLY, Serving, Support

    ignores = FA3.ignored_workers()
    if width != ndt and (ignores is None or is_draft_worker in ignores):
        return Support(Serving.REFUSED, f"lays the {WHO[is_draft_worker]} worker's TARGET_VERIFY out at "
                                        "speculative_num_draft_tokens (refused at start-up)")
    if verify_shape == TREE:
        return Support(Serving.REFUSED, EAGLE_TREE_ONLY)
    if width != ndt:
        return Support(Serving.SERVED, "the draft worker takes the width from the algorithm; causal within the block")
    return Support(Serving.SERVED, "SGLang's own layout at speculative_num_draft_tokens, causal within the block")


SUPPORT = {"fa3": support, "fa4": support}
"""``--attention-backend`` names this module answers for."""
