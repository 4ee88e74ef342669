"""The DFLASH_BLOCK worker SGLang instantiates (this module imports SGLang).

The whole step is :func:`sglang_spec_plugins.worker.draft_block_worker_base`'s,
for every request kind, under SGLang's overlap scheduler or without it:
each decode step the DFlash draft model drafts a block of ``B`` tokens per
request (``[root, mask x (B - 1)]`` in one TARGET_VERIFY forward on the
draft runner, the target's LM head greedy over its hidden states), the target
verifies the first ``W <= B`` of them, verification commits (a greedy request
by greedy acceptance, a sampled one by speculative sampling), and the
verified tokens' hidden states become the draft's context KV. ``B`` and ``W``
are the plugin's widths (``plugin.py``); the drafts are the base's greedy ones.
"""

from __future__ import annotations

from sglang_spec_plugins.worker import draft_block_worker_base


class DFlashBlockWorker(draft_block_worker_base()):
    """Drafts a block with its DFlash draft model, verifies ``W <= B`` of it; the base commits what it accepts."""
