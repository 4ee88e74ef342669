"""The PROMPT_LOOKUP worker SGLang instantiates (this module imports SGLang).

The draft-verify-accept step is :func:`sglang_spec_plugins.worker.chain_worker_base`'s,
for every request kind, under SGLang's overlap scheduler or without it:
each decode step takes its width from the framework (one width, or widths
by batch size, and where a bucket gives several the acceptance controller's
choice), drafts ``width - 1`` tokens per request, verifies ``[root,
drafts...]`` in one TARGET_VERIFY forward of the target and commits what
verification accepts. This worker supplies the drafts: prompt lookup
(``lookup.py``), with the plugin's ``max_ngram`` and ``min_ngram``.
"""

from __future__ import annotations

from typing import List

from sglang_spec_plugins.worker import chain_worker_base

from .lookup import propose
from .plugin import ngram_settings


class PromptLookupWorker(chain_worker_base()):
    """Drafts by prompt lookup; the base verifies a chain at each step's width and commits what it accepts."""

    def __init__(self, server_args, target_worker, **release_kwargs):
        super().__init__(server_args, target_worker, **release_kwargs)
        self.max_ngram, self.min_ngram = ngram_settings(self.policy.settings)

    def drafts(self, req, tokens: List[int], count: int) -> List[int]:
        """``count`` draft tokens to follow ``tokens`` (the request's prompt and every token it committed)."""
        return propose(tokens, count, max_ngram=self.max_ngram, min_ngram=self.min_ngram)
