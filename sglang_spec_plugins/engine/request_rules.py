"""What plain decoding does to the target's logits before it samples, done at every position of a verified chain.

Plain decoding applies, token by token (SGLang's ``SamplingBatchInfo.apply_logits_bias``):
the penalties of the tokens generated so far (frequency and presence
subtracted, stop tokens masked while fewer than ``min_new_tokens`` are out,
repetition scaling), then the grammar's vocabulary mask, then ``logit_bias``.
At chain position ``j`` the tokens generated so far are the request's output
and the drafts ``d_1 .. d_j``: :func:`apply_request_rules` applies exactly
that, so every position is judged as plain decoding would judge it were the
drafts before it committed (SGLang's own drafters apply one "relaxed" penalty
to every position). The rules need the request's output on the host for its
penalties and grammar: ``outputs`` and ``chains`` carry it.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence


def has_penalties(req: Any) -> bool:
    """Whether plain decoding penalises ``req``'s logits from its output so far."""
    params = req.sampling_params
    return bool(params.frequency_penalty or params.presence_penalty or params.repetition_penalty != 1.0
                or params.min_new_tokens > 0)


def needs_host_tokens(req: Any) -> bool:
    """Whether a step must know ``req``'s output tokens on the host: its penalties, or its grammar."""
    return has_penalties(req) or getattr(req, "grammar", None) is not None


def apply_request_rules(logits: Any, batch: Any, chains: Any, width: int,
                        outputs: Sequence[Optional[Sequence[int]]],
                        host_chains: Optional[Sequence[Sequence[int]]]) -> None:
    """Apply, in place, plain decoding's rules to ``logits`` ``(bs * width, vocab)``,
    row ``i * width + j`` the target's logits after chain position ``j`` of
    request ``i``. ``chains`` ``(bs, width)`` on the device; ``outputs[i]``: the
    output tokens request ``i`` has committed (its chain's root the last of them),
    needed where :func:`needs_host_tokens` (else None); ``host_chains``: the
    chains on the host, needed where a request has a grammar."""
    import torch

    info = batch.sampling_info
    penalised = [i for i, req in enumerate(batch.reqs) if has_penalties(req)]
    if penalised:
        _penalise(logits.view(len(batch.reqs), width, -1), batch, chains, penalised, [outputs[i] for i in penalised])
    if any(getattr(req, "grammar", None) is not None for req in batch.reqs):
        _mask_grammar(logits, batch.reqs, host_chains, width, info.vocab_size)
    if info.logit_bias is not None:
        logits.add_(torch.repeat_interleave(info.logit_bias, width, dim=0).to(logits.dtype))


def _penalise(logits: Any, batch: Any, chains: Any, rows: List[int], outputs: List[Sequence[int]]) -> None:
    """The penalties of ``rows`` (``logits`` viewed ``(bs, width, vocab)``), from each one's
    output tokens and the drafts before each position."""
    import numpy
    import torch

    device, vocab, width = logits.device, logits.shape[-1], logits.shape[1]
    picked = torch.tensor(rows, dtype=torch.int64).to(device, non_blocking=True)
    longest = max(len(out) for out in outputs)
    padded = torch.full((len(rows), max(longest, 1)), vocab, dtype=torch.int64)  # vocab: a column no token counts in
    for k, out in enumerate(outputs):
        padded[k, :len(out)] = torch.as_tensor(list(out), dtype=torch.int64)
    padded = padded.to(device, non_blocking=True)
    counts = torch.zeros((len(rows), vocab + 1), dtype=torch.int32, device=device)
    counts.scatter_add_(1, padded, torch.ones(padded.shape, dtype=torch.int32, device=device))
    drafts = torch.nn.functional.one_hot(chains[picked, 1:], vocab + 1).int().cumsum(dim=1)  # drafts before each position
    counts = torch.cat([counts.unsqueeze(1), counts.unsqueeze(1) + drafts], dim=1)[:, :, :vocab]  # (k, width, vocab)
    longest += width
    params = [batch.reqs[i].sampling_params for i in rows]
    view = logits[picked]
    frequency = [p.frequency_penalty for p in params]
    if any(frequency):
        # the sum SGLang's penalizer builds for c occurrences: c float32 additions of the penalty, in order
        sums = numpy.zeros((len(rows), longest + 1), dtype=numpy.float32)
        sums[:, 1:] = numpy.asarray(frequency, dtype=numpy.float32)[:, None]
        table = torch.from_numpy(numpy.add.accumulate(sums, axis=1, dtype=numpy.float32)).to(device, non_blocking=True)
        view -= table.gather(1, counts.reshape(len(rows), -1).long()).view(counts.shape)
    present = counts > 0
    if any(p.presence_penalty for p in params):
        presence = torch.tensor([p.presence_penalty for p in params], dtype=torch.float32).to(device, non_blocking=True)
        view -= present * presence.view(-1, 1, 1)
    stops = _stop_token_penalties(batch, rows, vocab, device)
    if stops is not None:
        left = torch.tensor([[p.min_new_tokens - len(o)] for p, o in zip(params, outputs)], dtype=torch.int64)
        early = torch.arange(width, device=device).view(1, -1) < left.to(device, non_blocking=True)  # (k, width)
        view += torch.where(early.unsqueeze(2), stops.unsqueeze(1), torch.zeros((), device=device))
    if any(p.repetition_penalty != 1.0 for p in params):
        repetition = torch.tensor([p.repetition_penalty for p in params], dtype=torch.float32).to(device, non_blocking=True)
        scale = torch.where(present, repetition.view(-1, 1, 1), torch.ones((), device=device))
        view.copy_(torch.where(view < 0, view * scale, view / scale))
    logits[picked] = view


def _stop_token_penalties(batch: Any, rows: List[int], vocab: int, device: Any) -> Optional[Any]:
    """``(k, vocab)``: -inf at each of ``rows``' stop tokens, 0 elsewhere; None where no
    row asks for ``min_new_tokens``. The stop tokens are those SGLang's min-new-tokens
    penalizer masks: the request's ``stop_token_ids``, its EOS ids, and its
    tokenizer's EOS and additional stop ids."""
    import torch

    reqs = [batch.reqs[i] for i in rows]
    if not any(req.sampling_params.min_new_tokens > 0 for req in reqs):
        return None
    penalties = torch.zeros((len(reqs), vocab), dtype=torch.float32)
    for k, req in enumerate(reqs):
        tokenizer = getattr(req, "tokenizer", None)
        stops = set(req.sampling_params.stop_token_ids or ()) | set(getattr(req, "eos_token_ids", None) or ())
        stops |= set(getattr(tokenizer, "additional_stop_token_ids", None) or ())
        stops.add(getattr(tokenizer, "eos_token_id", None))
        for token in stops:
            if token is not None and 0 <= token < vocab:
                penalties[k, token] = float("-inf")
    return penalties.to(device, non_blocking=True)


def _mask_grammar(logits: Any, reqs: Sequence[Any], chains: Sequence[Sequence[int]], width: int, vocab: int) -> None:
    """Each grammar request's vocabulary mask at every chain position: the grammar
    advanced through the drafts before it (while it accepts them), then set back."""
    grammar = next(req.grammar for req in reqs if getattr(req, "grammar", None) is not None)
    masks = grammar.allocate_vocab_mask(vocab_size=vocab, batch_size=len(reqs) * width, device="cpu")
    for i, req in enumerate(reqs):
        if getattr(req, "grammar", None) is not None:
            _fill_chain(req.grammar, chains[i], masks[i * width:(i + 1) * width], vocab)
    grammar.apply_vocab_mask(logits, grammar.move_vocab_mask(masks, logits.device))


def _fill_chain(grammar: Any, chain: Sequence[int], masks: Any, vocab: int) -> None:
    """Rows ``0..`` of ``masks``: the grammar's mask after the chain's root, then after
    each draft it accepts; past the first draft it refuses, rows stay unconstrained
    (no token there can commit: that draft has probability 0 at the row before)."""
    advanced = 0
    try:
        for j, token in enumerate(chain):
            if j > 0:
                if not 0 <= token < vocab or not (int(masks[j - 1, token // 32]) >> (token % 32)) & 1:
                    break
                grammar.accept_token(int(token))
                advanced += 1
            if grammar.is_terminated():
                break
            grammar.fill_vocab_mask(masks, j)
    finally:
        if advanced:
            grammar.rollback(advanced)
