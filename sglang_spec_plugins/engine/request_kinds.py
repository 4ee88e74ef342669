"""Which kinds of request the worker bases serve on the installed release, and the 400 for the others.

The bases verify every request exactly as plain decoding decodes it
(:mod:`.chain_sampling`, :mod:`.request_rules`): greedy and sampled requests
(temperature, top-k, top-p, min-p), penalties, ``logit_bias``,
``min_new_tokens`` and grammars (JSON schema, regex, EBNF) on every release
0.5.14+, and ``return_logprob`` where the release has its spec-verify logprob
function (what its own drafters hand those requests). A custom logit processor
is refused on every release: it sees one position per call, so a chain's later
positions cannot be judged as plain decoding judges them (SGLang's own drafters
do not apply it at draft positions either). Sampled requests are refused under
``--enable-deterministic-inference``, whose per-request seeds plain sampling
draws with and verification cannot reproduce.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, Callable, Dict, Optional

KINDS = ("greedy", "sampling", "penalties", "logit_bias", "min_new_tokens", "return_logprob", "grammar",
         "custom_logit_processor")
"""The request kinds :func:`served` reports on, as messages and ``check`` name them."""


def served(contract: Any) -> Dict[str, Optional[str]]:
    """Per kind of :data:`KINDS`: None where the bases serve it on the release
    ``contract`` (a :class:`~.worker_contract.WorkerContract`) describes, else why not."""
    found = {kind: None for kind in KINDS}
    if contract.release is not None and contract.spec_logprobs is None:
        found["return_logprob"] = f"SGLang {contract.release} has no spec-verify logprob function"
    found["custom_logit_processor"] = ("it sees one position per call, not a chain's; SGLang's own drafters do not "
                                       "apply it to drafts either")
    return found


def summary(contract: Any) -> str:
    """One line of what the bases serve on the release ``contract`` describes, and what they refuse, why."""
    kinds = served(contract)
    refused = [f"{kind} ({why})" for kind, why in kinds.items() if why is not None]
    return (f"serves {', '.join(kind for kind, why in kinds.items() if why is None)}"
            + (f"; refuses {'; '.join(refused)}" if refused else ""))


def refusal_head(algorithm: str) -> str:
    """How every refusal of ``algorithm`` begins (a client or a soak tells refusals by it)."""
    return f"{algorithm} speculative decoding cannot serve this request exactly: "


def refusal(req: Any, algorithm: str, contract: Any, deterministic: bool = False) -> Optional[str]:
    """Why the bases cannot serve ``req`` exactly on the release ``contract``
    describes (``deterministic``: the server runs ``--enable-deterministic-inference``), or None."""
    kinds = served(contract)
    params = req.sampling_params
    asked = [
        (bool(getattr(req, "custom_logit_processor", None)), "custom_logit_processor"),
        (bool(req.return_logprob), "return_logprob"),
    ]
    reasons = [kinds[kind] for hit, kind in asked if hit and kinds[kind] is not None]
    if deterministic and params.top_k > 1:
        reasons.append("sampling under --enable-deterministic-inference (its per-request seeds; use temperature 0)")
    return refusal_head(algorithm) + "; ".join(reasons) if reasons else None


def refuse_unservable(batch: Any, refusal_of: Callable[[Any], Optional[str]]) -> None:
    """Finish, before their first decode step, the requests of a prefill batch
    that ``refusal_of(req)`` gives a reason for (400 with the reason; the server
    goes on)."""
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    for req in batch.reqs:
        why = refusal_of(req)
        if why is not None and req.to_finish is None:
            req.to_finish = FINISH_ABORT(why, HTTPStatus.BAD_REQUEST, "BadRequestError")
