"""What a worker with its own draft model declares (pure, no SGLang).

A drafter whose worker loads a draft model from ``--speculative-draft-model-path``
(a DFLASH-style block drafter) needs things from SGLang that SGLang gives
only to its DFLASH family, which a plugin algorithm never is. It declares
them in :class:`DraftModel` (``AlgorithmSpec(draft_model=DraftModel())``);
each SGLang site that decides one of them for DFLASH alone then decides it
from the declaration for the plugin too (``patches.draft_model``), and every
other DFLASH-only site is either answered by the worker contract or refused
at start-up by name (``engine.dflash_sites``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Tuple


DFLASH = "dflash"
"""The draft checkpoint layout SGLang's DFlash draft models read: ``architectures``
one of SGLang's DFlash draft classes (``DFlashDraftModel``), ``hidden_size``
the target's, ``dflash_config`` (or the top level) with ``block_size``,
``target_layer_ids`` and ``mask_token_id``; no embedding, no LM head (the
target's are used)."""

LAYOUTS = (DFLASH,)

FIRST_RELEASE = "0.5.14"
"""The first SGLang release that serves a draft-model plugin (its scheduler drives a plugin
worker on the V2 speculative schema)."""


@dataclass(frozen=True)
class DraftModel:
    """A draft model of the worker's own, and what it needs from SGLang.

    ``layout``: how the draft checkpoint is read and checked at start-up
    (:data:`DFLASH`, the only layout today).

    ``capture_target_layers``: the target captures the hidden states of the
    target layers the draft config names (``target_layer_ids``), in its
    prefill and in every TARGET_VERIFY token (``CaptureHiddenMode.FULL``,
    CUDA graphs captured so), as SGLang does for DFLASH; the worker reads them
    in ``logits_output.hidden_states``.

    ``kv_pool``: the draft runner keeps a KV pool of its own over the
    target's token ids (the scheduler's slots index both), and the target
    counts its bytes per token in the KV budget it sizes from free memory, as
    SGLang does for DFLASH: no silent loss of headroom, no out-of-memory.

    ``input_embeds``: the draft runner's forwards take ``input_embeds`` (the
    target's embedding of the block); its CUDA graphs capture with that input
    and each replay copies the step's embeddings in, as for DFLASH's draft.

    Per-step KV reservation needs no declaration: the scheduler reserves
    ``--speculative-num-draft-tokens`` slots per request per step (steps and
    topk are 1), the block the draft runner writes; the start-up check
    requires the draft runner's width (``sgl_spec_verify_width`` with
    ``is_draft_worker=True``) to be that.
    """

    layout: str = DFLASH
    capture_target_layers: bool = True
    kv_pool: bool = True
    input_embeds: bool = True

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"DraftModel: layout must be one of {', '.join(map(repr, LAYOUTS))}, got {self.layout!r}")
        for name in NEEDS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"DraftModel: {name} must be True or False, got {getattr(self, name)!r}")


NEEDS: Tuple[str, ...] = tuple(f.name for f in fields(DraftModel) if f.name != "layout")
"""The declared needs, by field name: what a served DFLASH-only site asks of the declaration."""
