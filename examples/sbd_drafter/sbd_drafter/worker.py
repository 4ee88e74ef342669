"""The SBD worker SGLang instantiates: a chain worker drafting the masked block (imports SGLang).

Verification, acceptance and what a step returns are the chain base's
(:func:`sglang_spec_plugins.worker.chain_worker_base`); this worker
supplies two hooks: ``step_width`` (the width that holds the batch's block,
``blocks.block_width``) and ``drafts`` (the request's carried guesses padded
with the mask token). The guesses are the base's ``carried(req)``: the
target's tokens past what the request committed at its latest step, kept by
the base with the request's own step state (nothing to clean up when a
request finishes, is aborted or is retracted).
"""

from __future__ import annotations

from typing import List

from sglang_spec_plugins.worker import chain_worker_base

from .blocks import block_drafts, block_width
from .plugin import block_settings


class SBDWorker(chain_worker_base()):
    """Verifies ``[root, guesses..., mask...]`` per request at a width it picks each step."""

    def __init__(self, server_args, target_worker, **release_kwargs):
        super().__init__(server_args, target_worker, **release_kwargs)
        try:  # before the first step: the vocabulary is the loaded target's
            self.mask_token_id, self.mask_block = block_settings(
                self.policy.settings, self.target_worker.model_runner.model_config.vocab_size)
        except ValueError as exc:
            raise self.policy.fault(str(exc)) from None

    def step_width(self, batch) -> int:
        size = len(batch.reqs)
        most = max(len(self.carried(req)) for req in batch.reqs)
        return self.widths.at(size, block_width(self.widths.choices(size), most, self.mask_block))

    def drafts(self, req, tokens: List[int], count: int) -> List[int]:
        return block_drafts(self.carried(req), count, self.mask_token_id)
