"""One chain verify step's tensor math, and a whole greedy decode through it (torch only)."""

import pytest

torch = pytest.importorskip("torch")

from prompt_lookup_drafter.lookup import propose  # noqa: E402
from sglang_spec_plugins.worker import (WidthsByBatchSize, WidthSchedule, accept_greedy, cache_locations,  # noqa: E402
                                        carried_rows, verify_positions)


def test_accepted_drafts_are_the_matching_prefix_plus_the_bonus():
    drafts = torch.tensor([[10, 11, 12, 13], [10, 11, 12, 13], [10, 99, 12, 13], [10, 11, 12, 13]])
    predicted = torch.tensor([[11, 12, 13, 14], [11, 12, 50, 51], [11, 12, 13, 14], [11, 99, 13, 14]])
    assert accept_greedy(drafts, predicted).tolist() == [4, 3, 1, 2]
    assert accept_greedy(drafts, predicted).dtype == torch.int32


def test_positions_and_kv_slots_follow_each_request_s_row():
    seq_lens = torch.tensor([5, 0, 2])
    positions = verify_positions(seq_lens, 3)
    assert positions.tolist() == [[5, 6, 7], [0, 1, 2], [2, 3, 4]]
    req_to_token = torch.arange(40, dtype=torch.int32).view(4, 10)
    slots = cache_locations(req_to_token, torch.tensor([2, 0, 3]), positions)
    assert slots.tolist() == [[25, 26, 27], [0, 1, 2], [32, 33, 34]] and slots.dtype == torch.int64


def _target(context):
    """A deterministic stand-in target: the next token is a function of the last three."""
    a, b, c = ([0, 0, 0] + list(context))[-3:]
    return (7 * a + 3 * b + c) % 11 + (c % 2)


@pytest.mark.parametrize("width", [1, 2, 4, 8])
def test_greedy_decoding_through_draft_and_verify_gives_plain_greedy_tokens(width):
    """The worker's loop without SGLang: draft by lookup, 'verify' with the target's
    argmax after each chain token, commit ``accept_greedy`` tokens of ``predicted``."""
    prompt, new = [3, 1, 4, 1, 5, 9, 2, 6], 60
    plain = _plain(prompt, new)
    tokens, steps = list(prompt), 0
    while len(tokens) < len(prompt) + new:
        chain = [tokens[-1], *propose(tokens, width - 1)]
        predicted = [_target(tokens + chain[1:j + 1]) for j in range(width)]
        committed = int(accept_greedy(torch.tensor([chain]), torch.tensor([predicted]))[0])
        tokens += predicted[:committed]
        steps += 1
    assert tokens[:len(plain)] == plain
    if width > 1:
        assert steps < new  # the lookup found the target's cycle: more than one token per step


def _plain(prompt, new):
    tokens = list(prompt)
    while len(tokens) < len(prompt) + new:
        tokens.append(_target(tokens))
    return tokens


def test_carried_rows_pad_to_the_stride():
    rows = torch.tensor([[1, 2], [3, 4]])
    assert carried_rows(rows, 4).tolist() == [[1, 2, 0, 0], [3, 4, 0, 0]]
    assert carried_rows(rows, 2).tolist() == rows.tolist()


def test_a_batch_whose_width_follows_its_size_decodes_as_plain_greedy():
    """The worker's batched loop at widths by batch size ``{1 = 5, 2 = 3, 3 = 2}``:
    requests arrive late and finish early, so the batch grows and shrinks across
    bucket boundaries; every request of a step verifies the step's width, and what
    it commits is read back through rows carried at the largest width's stride."""
    schedule = WidthSchedule(WidthsByBatchSize.parse({1: 5, 2: 3, 3: 2}))
    stride = schedule.buckets.maximum
    requests = {"a": ([3, 1, 4, 1, 5, 9, 2, 6], 50, 0), "b": ([2, 7, 1, 8, 2, 8], 30, 0), "c": ([1, 6, 1, 8], 20, 4)}
    tokens = {rid: list(prompt) for rid, (prompt, _, _) in requests.items()}
    step, widths = 0, []
    while True:
        active = [rid for rid, (prompt, new, arrives) in requests.items()
                  if arrives <= step and len(tokens[rid]) < len(prompt) + new]
        if not active:
            break
        width = schedule.width(len(active))
        chains = [[tokens[rid][-1], *propose(tokens[rid], width - 1)] for rid in active]
        predicted = [[_target(tokens[rid] + chain[1:j + 1]) for j in range(width)] for rid, chain in zip(active, chains)]
        accept_lens = accept_greedy(torch.tensor(chains), torch.tensor(predicted))
        carried = carried_rows(torch.tensor(predicted), stride).flatten()
        for i, rid in enumerate(active):
            tokens[rid] += carried.reshape(-1, stride)[i, :int(accept_lens[i])].tolist()
        widths.append((len(active), width))
        step += 1
    for rid, (prompt, new, _) in requests.items():
        assert tokens[rid][:len(prompt) + new] == _plain(prompt, new), rid
    assert {w for _, w in widths} == {5, 3, 2}, widths  # the batch crossed every boundary
    assert all(w == schedule.buckets.at(bs) for bs, w in widths), widths
