"""The FAULTY_LOOKUP worker: PROMPT_LOOKUP's, with a fault drawn for a share of its decode steps."""

from __future__ import annotations

import random
import sys
from typing import List, Optional

from prompt_lookup_drafter.worker import PromptLookupWorker

FAULTS = ("raise", "exit", "too_many", "out_of_vocabulary", "width_zero", "width_negative", "width_float",
          "undeclared_width")
"""What a faulting step does: its ``drafts`` raises, calls ``sys.exit``, returns a token too many or ids past
the vocabulary (for the step's first request); or its ``step_width`` returns 0, -1 or 2.0, or asks
``StepWidths.at`` for a width the algorithm never declared."""


class FaultyLookupWorker(PromptLookupWorker):
    """Each decode step (one ``step_width`` call) faults with probability ``fault_rate``: one of
    :data:`FAULTS`, drawn from a generator seeded by ``fault_seed``."""

    def __init__(self, server_args, target_worker, **release_kwargs):
        super().__init__(server_args, target_worker, **release_kwargs)
        settings = self.policy.settings
        self.fault_rate = settings.get("fault_rate", 0.01)
        self.draws = random.Random(f"faulty-lookup-{settings.get('fault_seed', 0)}")
        self.now: Optional[str] = None
        self.first_rid: Optional[str] = None

    def step_width(self, batch):
        self.now = self.draws.choice(FAULTS) if self.draws.random() < self.fault_rate else None
        self.first_rid = batch.reqs[0].rid
        if self.now == "width_zero":
            return 0
        if self.now == "width_negative":
            return -1
        if self.now == "width_float":
            return 2.0
        if self.now == "undeclared_width":
            return self.widths.at(len(batch.reqs), 10 ** 3)
        return super().step_width(batch)

    def drafts(self, req, tokens: List[int], count: int) -> List[int]:
        drafted = super().drafts(req, tokens, count)
        if req.rid != self.first_rid or self.now is None:
            return drafted
        if self.now == "raise":
            raise RuntimeError("a drafter bug (FAULTY_LOOKUP's injected fault)")
        if self.now == "exit":
            sys.exit(3)
        if self.now == "too_many":
            return drafted + [drafted[-1] if drafted else 0]
        if self.now == "out_of_vocabulary":
            return [10 ** 6] * count
        return drafted
