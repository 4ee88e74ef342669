"""The CONTROLLED_ACCEPTANCE worker: PROMPT_LOOKUP's, drafting by ``draws.drafts`` (imports SGLang)."""

from __future__ import annotations

from typing import List, Optional

from prompt_lookup_drafter.worker import PromptLookupWorker

from sglang_spec_plugins.worker import policy_for

from .draws import drafts, prompt_key
from .plugin import acceptance_value, load_continuations, settings_of


class ControlledAcceptanceWorker(PromptLookupWorker):
    """Drafts each request's recorded continuation at its acceptance; verifies and accepts as PROMPT_LOOKUP."""

    def __init__(self, server_args, target_worker, **release_kwargs):
        super().__init__(server_args, target_worker, **release_kwargs)
        path, self.acceptance, self.seed = settings_of(policy_for(server_args).settings)
        self.continuations = load_continuations(path)
        self.vocab_size = self.target_worker.model_runner.model_config.vocab_size

    def refusal(self, req) -> Optional[str]:
        why = super().refusal(req)
        if why is None:
            try:
                self._acceptance_of(req)
            except ValueError as exc:
                return str(exc)
        return why

    def drafts(self, req, tokens: List[int], count: int) -> List[int]:
        key = prompt_key(req.origin_input_ids)
        continuation = self.continuations.get(key)
        planned = None if continuation is None else drafts(
            continuation, req.output_ids, count, self._acceptance_of(req), self.seed, key, self.vocab_size)
        return super().drafts(req, tokens, count) if planned is None else planned

    def _acceptance_of(self, req) -> float:
        custom = getattr(req.sampling_params, "custom_params", None)
        if isinstance(custom, dict) and "acceptance" in custom:
            return acceptance_value(custom["acceptance"], 'sampling_params.custom_params["acceptance"]')
        return self.acceptance
