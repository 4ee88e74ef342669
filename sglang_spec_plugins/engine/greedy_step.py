"""What a greedy-verifying plugin worker hands SGLang's scheduler each step (imports SGLang).

SGLang 0.5.14+ drives a plugin worker on its V2 speculative schema, the way it
drives its own model-free NGRAM worker: before every decode step the scheduler
reserves KV slots ahead of each request (``eagle_prepare_for_decode``:
``--speculative-num-draft-tokens`` per request), calls
``forward_batch_generation(batch)`` and, from the result, commits
``accept_lens[i]`` tokens of row ``i`` of ``next_token_ids`` and moves
``batch.seq_lens`` to ``new_seq_lens``. ``batch.seq_lens`` counts the tokens
whose KV is written; the request's last token (the root) is not among them.
A worker verifying a chain of ``width`` tokens per request (its root and
``width - 1`` drafts) places them at :func:`verify_positions` in the slots
:func:`cache_locations` reads off the request's row, and returns
:func:`step_result`.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, Callable, Optional


def greedy_refusal(req: Any, algorithm: str) -> Optional[str]:
    """Why ``req`` cannot be served exactly by greedy verification, or None."""
    params = req.sampling_params
    reasons = [
        (params.top_k > 1 and params.temperature > 0, "sampling with temperature > 0 (use temperature 0)"),
        (params.frequency_penalty or params.presence_penalty or params.repetition_penalty != 1.0, "penalties"),
        (bool(getattr(params, "logit_bias", None)), "logit_bias"),
        (params.min_new_tokens > 0, "min_new_tokens"),
        (bool(getattr(req, "custom_logit_processor", None)), "a custom logit processor"),
        (req.return_logprob, "return_logprob"),
        (getattr(req, "grammar", None) is not None, "grammar-constrained decoding"),
    ]
    found = [why for hit, why in reasons if hit]
    return refusal_head(algorithm) + ", ".join(found) if found else None


def refusal_head(algorithm: str) -> str:
    """How every :func:`greedy_refusal` of ``algorithm`` begins (a client or a soak tells refusals by it)."""
    return f"{algorithm} speculative decoding serves greedy requests only; this one asks for "


def refuse_unservable(batch: Any, refusal: Callable[[Any], Optional[str]]) -> None:
    """Finish, before their first decode step, the requests of a prefill batch
    that ``refusal(req)`` gives a reason for (400 with the reason; the server
    goes on); a worker's ``refusal`` is :func:`greedy_refusal` or adds to it."""
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    for req in batch.reqs:
        why = refusal(req)
        if why is not None and req.to_finish is None:
            req.to_finish = FINISH_ABORT(why, HTTPStatus.BAD_REQUEST, "BadRequestError")


def verify_positions(seq_lens: Any, width: int) -> Any:
    """``(bs, width)`` positions of each request's chain: ``seq_lens[i] + j``."""
    import torch

    return seq_lens.to(torch.int64).unsqueeze(1) + torch.arange(width, device=seq_lens.device, dtype=torch.int64)


def cache_locations(req_to_token: Any, req_pool_indices: Any, positions: Any) -> Any:
    """``(bs, width)`` KV slots of those positions: the request's row of
    ``req_to_token`` (slots the scheduler reserved ahead)."""
    import torch

    return req_to_token[req_pool_indices.to(torch.int64).unsqueeze(1), positions].to(torch.int64)


def carried_rows(rows: Any, stride: int) -> Any:
    """``rows`` ``(bs, width)`` padded with zeros to ``(bs, stride)``, ``stride >= width``.

    What a step carries to the next is filtered (finished requests leave) and
    merged (new requests join) by SGLang as flat rows of one stride; with a
    width that changes between steps, every step carries rows of the largest
    width, so rows of different steps line up. The scheduler reads only the
    first ``accept_lens[i]`` tokens of row ``i``."""
    import torch

    return torch.nn.functional.pad(rows, (0, stride - rows.shape[1]))


def step_result(logits_output: Any, rows: Any, accept_lens: Any, new_seq_lens: Any, can_run_cuda_graph: bool,
                stride: int) -> Any:
    """The step's ``GenerationBatchResult``: ``rows`` ``(bs, width)``, row ``i``
    starting with the ``accept_lens[i]`` tokens request ``i`` commits; what
    the scheduler carries to the next step (an ``NgramVerifyInput``, as for
    SGLang's model-free NGRAM) has rows of ``stride``, the largest width."""
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.speculative.ngram_info import NgramVerifyInput

    carried = NgramVerifyInput(draft_token_num=stride, new_seq_lens=new_seq_lens,
                               accept_tokens=carried_rows(rows, stride).flatten(), accept_lens=accept_lens)
    return GenerationBatchResult(
        logits_output=logits_output, next_token_ids=rows.flatten(), accept_lens=accept_lens,
        new_seq_lens=new_seq_lens, next_draft_input=carried, can_run_cuda_graph=can_run_cuda_graph,
        speculative_num_draft_tokens=rows.shape[1],  # the row stride of next_token_ids
    )


def idle_result(device: Any, stride: int) -> Any:
    """The result of a step with no request (an idle batch)."""
    import torch

    tokens = torch.empty((0, stride), dtype=torch.int64, device=device)
    lens = torch.empty((0,), dtype=torch.int64, device=device)
    return step_result(None, tokens, lens.to(torch.int32), lens, False, stride)
