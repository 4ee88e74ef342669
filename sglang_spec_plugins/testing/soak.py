"""A soak: many mixed requests through a serving engine, and what must hold after it.

:func:`mixed_requests` makes the request set, the same from the same seed:
prompts of our own (a random phrase said over and over, whose continuation
prompt lookup finds, or random tokens) of mixed prompt and output lengths;
a share of each kind beyond greedy (:data:`DEFAULT_MIX`: sampling at
temperature 0.8, greedy with ``return_logprob``, greedy under a JSON schema,
and requests that the client aborts mid-stream after a few streamed
outputs); the rest greedy, with EOS ignored, so each must finish with
exactly ``max_new_tokens`` tokens.

A driver (``tools/gpu/soak.py`` on ``sglang.Engine`` and SGLang's HTTP
server, :mod:`.scheduler_soak` on the real ``Scheduler`` on a CPU) serves
them and records one :data:`Outcome` per request; :func:`verdict` reads the
outcomes of a run, against a plain (non-speculative) run's outputs when
given. Nothing here imports SGLang.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

GREEDY, SAMPLED, LOGPROB, JSON, ABORT = "greedy", "sampled", "logprob", "json", "abort"
STRICT_POOL_CHECKS = {"SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE": "1", "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY": "1",
                      "SGLANG_CHECK_KV_PAGE_INVARIANTS": "1"}
"""The environment that makes SGLang's own pool checks strict (0.5.16+; earlier releases read none of
them): at idle (a leaked KV or request slot), after every step (the pool's accounting) and of its KV pages
(none both owned and free, none freed twice). An error there stops the scheduler."""
BEYOND_GREEDY = (SAMPLED, LOGPROB, JSON)
DETERMINISTIC = (GREEDY, LOGPROB, JSON)
"""The kinds whose outputs plain greedy decoding fixes: a plain run serves them, and a speculative run's
are compared with its outputs token by token."""
DEFAULT_MIX = {SAMPLED: 0.025, LOGPROB: 0.025, ABORT: 0.05}
"""The share of each kind besides greedy in :func:`mixed_requests`' set."""
JSON_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"}},
               "required": ["id", "ok"], "additionalProperties": False}
"""The schema of :data:`JSON` requests: small, so that its object closes well within their tokens."""
JSON_NEW_TOKENS = 64
"""At least this many tokens for a :data:`JSON` request (its object closes before, where the model lets it)."""

Outcome = Dict[str, Any]
"""What a driver records for one request: ``output_ids`` (list), ``finish``
(SGLang's ``finish_reason``: a dict with ``type`` and, for an abort,
``message``; None if none came), ``error`` (the message of an error the
client got instead of an output, e.g. a refusal through a non-streaming
call), ``retractions`` (SGLang's ``num_retractions``, where the release
reports it), ``verify_steps`` (``spec_verify_ct``), ``chunks`` (streamed
outputs received), ``disconnected`` (True where the client closed its
connection mid-stream, as an HTTP client that goes away does: it sees no
finish), ``abort_sent`` (True once the client asked SGLang to abort it; an
error it then gets for its own abort counts as the abort)."""


@dataclass(frozen=True)
class SoakRequest:
    """One request of the set: what to send, and what kind it is."""

    rid: str
    input_ids: Tuple[int, ...]
    max_new_tokens: int
    kind: str = GREEDY
    abort_after: int = 0
    """For :data:`ABORT`: streamed outputs the client takes before it aborts (at least 1)."""

    @property
    def stream(self) -> bool:
        return self.kind == ABORT

    def sampling_params(self) -> Dict[str, Any]:
        """SGLang's ``sampling_params`` for it (EOS ignored: greedy outputs have exactly ``max_new_tokens``;
        a :data:`JSON` request ends where its object does)."""
        params = {"temperature": 0.8 if self.kind == SAMPLED else 0.0, "max_new_tokens": self.max_new_tokens,
                  "ignore_eos": True}
        if self.kind == JSON:
            params["json_schema"] = json.dumps(JSON_SCHEMA)
        return params

    @property
    def return_logprob(self) -> bool:
        return self.kind == LOGPROB


def mixed_requests(count: int, seed: int = 0, vocab: int = 32000, prompt_lengths: Tuple[int, int] = (8, 1024),
                   output_lengths: Tuple[int, int] = (1, 256), mix: Optional[Mapping[str, float]] = None,
                   max_abort_after: int = 6) -> List[SoakRequest]:
    """``count`` requests (see the module doc). ``mix``: the share of each kind
    besides greedy (:data:`DEFAULT_MIX` when None; the rest are greedy). Prompt
    and output lengths are drawn log-uniformly from the inclusive ranges, so
    short and long ones both occur often; token ids from 5 to ``vocab - 1``."""
    shares = dict(DEFAULT_MIX if mix is None else mix)
    unknown = set(shares) - {*BEYOND_GREEDY, ABORT}
    if unknown or any(not 0 <= share <= 1 for share in shares.values()) or sum(shares.values()) > 1:
        raise ValueError(f"mix {shares!r}: shares in [0, 1], of {', '.join((*BEYOND_GREEDY, ABORT))}, "
                         "that add up to at most 1")
    rng = random.Random(f"soak-{seed}")

    def length(low: int, high: int) -> int:
        return min(high, max(low, int(round(low * (high / low) ** rng.random()))))

    requests = []
    for i in range(count):
        size = length(*prompt_lengths)
        if rng.random() < 0.5:
            phrase = [rng.randrange(5, vocab) for _ in range(rng.randrange(3, 12))]
            tokens = (phrase * (size // len(phrase) + 1))[:size]
        else:
            tokens = [rng.randrange(5, vocab) for _ in range(size)]
        roll, kind = rng.random(), GREEDY
        for candidate, share in shares.items():
            if roll < share:
                kind = candidate
                break
            roll -= share
        new_tokens = length(*output_lengths)
        if kind == ABORT:
            new_tokens = max(new_tokens, 4 * max_abort_after)  # long enough to be aborted mid-stream
        elif kind == JSON:
            new_tokens = max(new_tokens, JSON_NEW_TOKENS)
        requests.append(SoakRequest(f"soak-{seed}-{i:06d}", tuple(tokens), new_tokens, kind,
                                    rng.randrange(1, max_abort_after + 1) if kind == ABORT else 0))
    return requests


def verdict(requests: Sequence[SoakRequest], outcomes: Mapping[str, Outcome],
            plain: Optional[Mapping[str, Sequence[int]]] = None, refusal: Optional[str] = None) -> Dict[str, Any]:
    """What a run shows. ``plain``: the plain run's ``output_ids`` by rid, for
    the :data:`DETERMINISTIC` requests; ``refusal``: where the drafter serves
    greedy requests only, the text every refusal of a request beyond greedy
    must carry (None: they must be served). ``problems`` lists what must not
    happen: a request without an outcome; a greedy, or served sampled or
    logprob, request that did not finish with exactly its tokens; a JSON
    request whose object closed (``finish`` ``stop``) but whose ``text`` is
    not one of :data:`JSON_SCHEMA`, or that ended otherwise than closed or at
    its length; one that should be refused served or refused without the
    message; an abort that came back as neither aborted nor finished. A closed
    JSON request is compared with the plain output less its last token where
    that output is the request's own plus one (``plain_past_the_stop``): SGLang
    0.5.16's plain decoding under its overlap scheduler decodes one token past
    the grammar's stop token (it launched the next step before it knew; seen on
    the H200: ``[..., 125, 2]``, ``}`` and EOS, against ``[..., 125, 2, 16920]``).
    Divergences from the plain run are listed, not problems: where two kernels
    compute a logit differently a near-tie may go either way (the driver
    measures how near)."""
    problems: List[str] = []
    counts = {"requests": len(requests), "greedy": 0, "finished": 0, "served_beyond_greedy": 0, "refused": 0,
              "refused_with_message": 0, "aborted": 0, "finished_before_abort": 0, "tokens": 0, "retractions": 0,
              "retracted_requests": 0, "json_valid": 0, "json_unclosed": 0,
              "plain_past_the_stop": 0}
    divergent: List[Dict[str, Any]] = []
    identical = compared = 0
    for request in requests:
        outcome = outcomes.get(request.rid)
        if outcome is None:
            problems.append(f"{request.rid} ({request.kind}): no outcome")
            continue
        tokens = list(outcome.get("output_ids") or [])
        finish = outcome.get("finish") or {}
        finish_type = finish.get("type") if isinstance(finish, dict) else str(finish)
        retractions = int(outcome.get("retractions") or 0)
        counts["retractions"] += retractions
        counts["retracted_requests"] += retractions > 0
        if request.kind == ABORT:
            if finish_type == "abort" or outcome.get("disconnected") or (outcome.get("abort_sent") and outcome.get("error")):
                counts["aborted"] += 1
            elif finish_type == "length" and len(tokens) == request.max_new_tokens:
                counts["finished_before_abort"] += 1
            else:
                problems.append(f"{request.rid} (abort after {request.abort_after}): ended with "
                                f"{finish or outcome.get('error')!r} after {len(tokens)} tokens")
        elif request.kind in BEYOND_GREEDY and refusal is not None:
            message = outcome.get("error") or (finish.get("message") if isinstance(finish, dict) else None) or ""
            if finish_type == "abort" or outcome.get("error"):
                counts["refused"] += 1
                if refusal in message:
                    counts["refused_with_message"] += 1
                else:
                    problems.append(f"{request.rid} ({request.kind}): refused without the plugin's message: {message!r}")
            else:
                problems.append(f"{request.rid} ({request.kind}): served ({finish!r}), not refused")
        else:
            counts["greedy" if request.kind == GREEDY else "served_beyond_greedy"] += 1
            counts["tokens"] += len(tokens)
            if request.kind == JSON and not outcome.get("error") and finish_type == "stop":
                problem = json_problem(outcome.get("text"))
                if problem:
                    problems.append(f"{request.rid} (json): {problem}")
                    continue
                counts["json_valid"] += 1
            elif outcome.get("error") or finish_type != "length" or len(tokens) != request.max_new_tokens:
                problems.append(f"{request.rid} ({request.kind}): ended with {finish or outcome.get('error')!r} after "
                                f"{len(tokens)} of {request.max_new_tokens} tokens")
                continue
            counts["finished"] += request.kind == GREEDY
            counts["json_unclosed"] += request.kind == JSON and finish_type == "length"
            if request.kind != SAMPLED and plain is not None and request.rid in plain:
                compared += 1
                reference = list(plain[request.rid])
                if request.kind == JSON and finish_type == "stop" and reference[:len(tokens)] == tokens \
                        and len(reference) == len(tokens) + 1:
                    reference = reference[:len(tokens)]  # plain_past_the_stop: see the doc
                    counts["plain_past_the_stop"] += 1
                if tokens == reference:
                    identical += 1
                else:
                    at = next((i for i, (a, b) in enumerate(zip(tokens, reference)) if a != b),
                              min(len(tokens), len(reference)))
                    divergent.append({"rid": request.rid, "at": at, "token": tokens[at] if at < len(tokens) else None,
                                      "plain_token": reference[at] if at < len(reference) else None})
    return {**counts, "compared": compared, "identical": identical, "divergent": divergent, "problems": problems}


def json_problem(text: Optional[str]) -> Optional[str]:
    """What makes ``text`` not an object of :data:`JSON_SCHEMA` (None: it is one)."""
    if text is None:
        return "no text came back to check against the schema"
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"its text {text!r} is not JSON ({exc})"
    if (not isinstance(value, dict) or set(value) != {"id", "ok"} or type(value["id"]) is not int
            or type(value["ok"]) is not bool):
        return f"its object {text!r} is not one of the schema {json.dumps(JSON_SCHEMA)}"
    return None
