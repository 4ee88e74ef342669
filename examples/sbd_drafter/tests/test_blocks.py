"""SBD's own tests of its block and carry rules (torch, no SGLang)."""

import pytest

torch = pytest.importorskip("torch")

from sglang_spec_plugins.worker import accept_greedy  # noqa: E402
from sbd_drafter.blocks import block_drafts, block_width, carried_guesses  # noqa: E402

M = 255


def test_carried_guesses_predict_the_positions_after_the_new_root():
    """Chain [r, d1, d2, d3] at positions p..p+3; predicted[j] is the target's token for p+j+1. Request 0
    accepts d1 (commits predicted[0:2]; new root predicted[1] at p+2): its guesses are predicted[2:4], for
    p+3 and p+4. Request 1 accepts nothing (new root predicted[0]): predicted[1:4]. Request 2 accepts all."""
    drafts = torch.tensor([[1, 10, 7, 7], [1, 9, 9, 9], [1, 10, 11, 12]])
    predicted = torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23], [10, 11, 12, 13]])
    accept_lens = accept_greedy(drafts, predicted)
    assert accept_lens.tolist() == [2, 1, 4]
    assert carried_guesses(predicted, accept_lens) == [[12, 13], [21, 22, 23], []]


def test_a_step_that_accepts_nothing_grows_the_width_and_one_that_accepts_all_shrinks_it():
    """The carry and the width rule together, over steps of a batch of one at widths (2, 4, 8)."""
    choices, width = (2, 4, 8), block_width((2, 4, 8), 0, 1)
    assert width == 2
    predicted = torch.tensor([[30, 31]])  # chain [r, M]: M rejected
    guesses = carried_guesses(predicted, accept_greedy(torch.tensor([[1, M]]), predicted))
    assert guesses == [[31]] and block_width(choices, 1, 1) == 4
    chain = torch.tensor([[30, *block_drafts(guesses[0], 3, M)]])  # [30, 31, M, M]: 31 accepted
    predicted = torch.tensor([[31, 40, 41, 42]])
    guesses = carried_guesses(predicted, accept_greedy(chain, predicted))
    assert guesses == [[41, 42]] and block_width(choices, 2, 1) == 4
    chain = torch.tensor([[40, *block_drafts(guesses[0], 3, M)]])  # all three accepted: nothing carried
    predicted = torch.tensor([[41, 42, M, 50]])
    guesses = carried_guesses(predicted, accept_greedy(chain, predicted))
    assert guesses == [[]] and block_width(choices, 0, 1) == 2
