"""The CONTROLLED_ACCEPTANCE worker: PROMPT_LOOKUP's, drafting by ``draws.drafts`` and, where plugins.toml
sets ``width_cycle``, choosing each step's width itself (imports SGLang).

It drafts from the base's ``tokens`` (the request's prompt and every token it committed), never from
``req.output_ids``, which under SGLang's overlap scheduler lags by the tokens of the step in flight."""

from __future__ import annotations

from collections import OrderedDict
from typing import List, Optional, Sequence, Tuple

from prompt_lookup_drafter.worker import PromptLookupWorker

from .draws import drafts, keep_pattern, prompt_key
from .plugin import acceptance_value, load_continuations, settings_of, width_cycle_of

KEPT_REQUESTS = 4096
"""How many requests' draws are kept (the oldest are dropped first; a request drawn again gets the same)."""


class ControlledAcceptanceWorker(PromptLookupWorker):
    """Drafts each request's recorded continuation at its acceptance; verifies and accepts as PROMPT_LOOKUP."""

    def __init__(self, server_args, target_worker, **release_kwargs):
        super().__init__(server_args, target_worker, **release_kwargs)
        settings = self.policy.settings
        path, self.acceptance, self.seed = settings_of(settings)
        self.cycle = width_cycle_of(settings, self.widths.maximum)
        self.cycle_steps = 0  # decode steps so far (the cycle's position)
        self.continuations = load_continuations(path)
        self.vocab_size = self.target_worker.model_runner.model_config.vocab_size
        self._plans: "OrderedDict[str, Tuple[Sequence[int], List[bool]]]" = OrderedDict()

    def step_width(self, batch) -> int:
        """The cycle's width for this step where ``width_cycle`` is set (``StepWidths`` refuses one the algorithm
        does not declare, naming the plugin, before the step reaches the GPU), else the framework's."""
        if self.cycle is None:
            return super().step_width(batch)
        widths, steps = self.cycle
        width = widths[self.cycle_steps // steps % len(widths)]
        self.cycle_steps += 1
        return self.widths.at(len(batch.reqs), width)

    def refusal(self, req) -> Optional[str]:
        why = super().refusal(req)
        if why is None:
            try:
                self._acceptance_of(req)
            except ValueError as exc:
                return str(exc)
        return why

    def drafts(self, req, tokens: List[int], count: int) -> List[int]:
        plan = self._plan(req)
        output = tokens[len(req.origin_input_ids):]  # not req.output_ids: under overlap it lags the step in flight
        planned = None if plan is None else drafts(*plan, output, count, self.vocab_size)
        return super().drafts(req, tokens, count) if planned is None else planned

    def _plan(self, req) -> Optional[Tuple[Sequence[int], List[bool]]]:
        """The request's continuation and keep pattern, drawn at its first decode step (None: not recorded)."""
        if req.rid in self._plans:
            return self._plans[req.rid]
        key = prompt_key(req.origin_input_ids)
        continuation = self.continuations.get(key)
        plan = None if continuation is None else (
            continuation, keep_pattern(self.seed, key, len(continuation), self._acceptance_of(req)))
        self._plans[req.rid] = plan
        if len(self._plans) > KEPT_REQUESTS:
            self._plans.popitem(last=False)
        return plan

    def _acceptance_of(self, req) -> float:
        custom = getattr(req.sampling_params, "custom_params", None)
        if isinstance(custom, dict) and "acceptance" in custom:
            return acceptance_value(custom["acceptance"], 'sampling_params.custom_params["acceptance"]')
        return self.acceptance
