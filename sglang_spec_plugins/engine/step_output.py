"""What a plugin worker hands SGLang's scheduler each step (imports SGLang).

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
:func:`step_result`. Under the overlap scheduler (0.5.14+) the scheduler
relays what the result carries to the next step through its ``FutureMap``,
keyed by the request's pool slot, and passes the worker ``on_publish``, which
the step calls with ``new_seq_lens`` as soon as they are known.
"""

from __future__ import annotations

from typing import Any


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
                stride: int, overlap: bool) -> Any:
    """The step's ``GenerationBatchResult``: ``rows`` ``(bs, width)``, row ``i``
    starting with the ``accept_lens[i]`` tokens request ``i`` commits. What the
    scheduler carries to the next step: without overlap an ``NgramVerifyInput``
    (as for SGLang's model-free NGRAM) with rows of ``stride``, the largest
    width; under the ``overlap`` scheduler an ``EagleDraftInput`` holding each
    request's last committed token, which the scheduler's FutureMap relays (as
    for SGLang's V2 workers)."""
    from sglang.srt.managers.utils import GenerationBatchResult

    if overlap:
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
        from sglang.srt.speculative.eagle_info import EagleDraftInput

        last = rows.gather(1, (accept_lens.long() - 1).clamp_min(0).unsqueeze(1)).squeeze(1)
        carried = EagleDraftInput(bonus_tokens=last, capture_hidden_mode=CaptureHiddenMode.NULL)
    else:
        from sglang.srt.speculative.ngram_info import NgramVerifyInput

        carried = NgramVerifyInput(draft_token_num=stride, new_seq_lens=new_seq_lens,
                                   accept_tokens=carried_rows(rows, stride).flatten(), accept_lens=accept_lens)
    return GenerationBatchResult(
        logits_output=logits_output, next_token_ids=rows.flatten(), accept_lens=accept_lens,
        new_seq_lens=new_seq_lens, next_draft_input=carried, can_run_cuda_graph=can_run_cuda_graph,
        speculative_num_draft_tokens=rows.shape[1],  # the row stride of next_token_ids
    )


def idle_result(device: Any, stride: int, overlap: bool) -> Any:
    """The result of a step with no request (an idle batch)."""
    import torch

    tokens = torch.empty((0, stride), dtype=torch.int64, device=device)
    lens = torch.empty((0,), dtype=torch.int64, device=device)
    return step_result(None, tokens, lens.to(torch.int32), lens, False, stride, overlap)
