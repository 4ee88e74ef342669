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

import json
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Optional, Tuple


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


HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")
"""What a ``--speculative-draft-model-path`` that is no local folder may be instead: a Hugging Face repo id."""


def checkpoint_config(path: Any) -> Tuple[Optional[Any], str]:
    """``(config, where)`` of the model checkpoint at ``path`` (a ``--model-path`` or
    ``--speculative-draft-model-path``), as far as a local read finds it: ``config`` is its
    ``config.json`` as a dict; None where ``path`` is no local folder but may be a Hugging Face repo id (not
    read here); or a str saying what is wrong (no such folder, no ``config.json``, not JSON, not a JSON
    object), which SGLang's own reading would meet raw (0.5.14+ reads a draft's while it resolves the
    speculative algorithm, before any plugin check). ``where`` names the file."""
    folder = Path(os.path.expanduser(str(path)))
    where = str(folder / "config.json")
    if not folder.is_dir():
        if folder.exists():
            return "not a folder (a model checkpoint is a folder holding config.json)", str(path)
        if HUB_ID.fullmatch(str(path)) and not str(path).startswith("."):
            return None, f"{path} (config.json)"
        return "no such folder (nor a Hugging Face repo id, 'name' or 'namespace/name')", str(path)
    try:
        text = (folder / "config.json").read_text(encoding="utf-8")
    except FileNotFoundError:
        return f"{where}: no such file (a model checkpoint holds its config there)", where
    except (OSError, UnicodeDecodeError) as exc:
        return f"{where}: cannot be read ({type(exc).__name__}: {exc})", where
    try:
        config = json.loads(text)
    except ValueError as exc:
        return f"{where}: not JSON ({exc})", where
    if not isinstance(config, dict):
        return f"{where}: a JSON {type(config).__name__}, not an object holding the model's settings", where
    return config, where
