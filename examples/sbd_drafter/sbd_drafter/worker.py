"""The SBD worker SGLang instantiates: a chain worker drafting the masked block (imports SGLang).

Verification, acceptance and what a step returns are the chain base's
(:func:`sglang_spec_plugins.worker.chain_worker_base`); this worker
supplies its three hooks: ``step_width`` (the width that holds the batch's
block, ``blocks.block_width``), ``drafts`` (the request's carried guesses
padded with the mask token) and ``verified`` (the guesses the target's
argmax gives the next step, ``blocks.carried_guesses``). The guesses are kept
per request for one step (by rid, with the token count they follow), so
requests that finish, are aborted or are retracted leave nothing behind.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from sglang_spec_plugins.worker import chain_worker_base

from .blocks import block_drafts, block_width, carried_guesses
from .plugin import block_settings


class SBDWorker(chain_worker_base()):
    """Verifies ``[root, guesses..., mask...]`` per request at a width it picks each step; accepts greedily."""

    def __init__(self, server_args, target_worker, **release_kwargs):
        super().__init__(server_args, target_worker, **release_kwargs)
        try:  # before the first step: the vocabulary is the loaded target's
            self.mask_token_id, self.mask_block = block_settings(
                self.policy.settings, self.target_worker.model_runner.model_config.vocab_size)
        except ValueError as exc:
            raise self.policy.fault(str(exc)) from None
        self._guesses: Dict[str, Tuple[int, List[int]]] = {}  # rid -> (tokens known at the next step, guesses)

    def guesses(self, req) -> List[int]:
        """The guesses carried for ``req`` from the previous step, if it follows it (else none)."""
        known, guesses = self._guesses.get(req.rid, (-1, []))
        return guesses if known == len(req.origin_input_ids) + len(req.output_ids) else []

    def step_width(self, batch) -> int:
        size = len(batch.reqs)
        most = max(len(self.guesses(req)) for req in batch.reqs)
        return self.widths.at(size, block_width(self.widths.choices(size), most, self.mask_block))

    def drafts(self, req, tokens: List[int], count: int) -> List[int]:
        return block_drafts(self.guesses(req), count, self.mask_token_id)

    def verified(self, batch, drafts, predicted, accept_lens) -> None:
        self._guesses = {req.rid: (len(req.origin_input_ids) + len(req.output_ids) + int(committed), guesses)
                         for req, committed, guesses in zip(batch.reqs, accept_lens.tolist(),
                                                            carried_guesses(predicted, accept_lens))}
