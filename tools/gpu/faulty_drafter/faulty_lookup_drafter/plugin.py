"""FAULTY_LOOKUP: the example PROMPT_LOOKUP drafter, faulting at random in a share of its decode steps.

The GPU soak serves it to show that a drafter's faults never take the server down nor change a token
(issue 45). Settings (``[algorithms.FAULTY_LOOKUP]``, ``tools/gpu/engine/plugins_faulty.toml``): those of
PROMPT_LOOKUP, and ``fault_rate`` (the share of decode steps that fault, default 0.01) and ``fault_seed``
(the draws are the same from the same seed, per process). A faulting step draws one of
:data:`.worker.FAULTS`.
"""

import dataclasses

from sglang_spec_plugins import hookimpl

from prompt_lookup_drafter import plugin as lookup

ALGORITHM = "FAULTY_LOOKUP"
def _worker_factory(server_args):
    from .worker import FaultyLookupWorker  # imports SGLang: only inside SGLang's processes

    return FaultyLookupWorker


@hookimpl
def sgl_spec_algorithms():
    """PROMPT_LOOKUP's spec under this name and worker."""
    return [dataclasses.replace(spec, name=ALGORITHM, worker_factory=_worker_factory)
            for spec in lookup.sgl_spec_algorithms()]


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, settings):
    if algorithm != ALGORITHM:
        return None
    rate = settings.get("fault_rate", 0.01)
    if not isinstance(rate, float) or not 0.0 <= rate <= 1.0:
        raise ValueError(f"[algorithms.{ALGORITHM}] fault_rate = {rate!r}: it must be a float in [0, 1]")
    return lookup.sgl_spec_verify_width(lookup.ALGORITHM, num_draft_tokens, settings)
