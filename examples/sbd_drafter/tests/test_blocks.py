"""SBD's own tests of its block and width rules (no SGLang, no torch)."""

from sbd_drafter.blocks import block_drafts, block_width

M = 255


def test_block_drafts_are_the_guesses_cut_and_padded_with_the_mask():
    assert block_drafts([7, 8, 9], 2, M) == [7, 8]
    assert block_drafts([7], 3, M) == [7, M, M]
    assert block_drafts([], 2, M) == [M, M]


def test_a_step_that_accepts_nothing_grows_the_width_and_one_that_accepts_all_shrinks_it():
    """The width rule over steps of a batch of one at widths (2, 4, 8): the root, the carried guesses and one mask."""
    choices = (2, 4, 8)
    assert block_width(choices, 0, 1) == 2  # [r, M]: nothing carried
    assert block_width(choices, 1, 1) == 4  # M rejected, one guess carried: [r, g, M] needs 3
    assert block_width(choices, 2, 1) == 4  # one guess accepted, two carried: [r, g, g, M]
    assert block_width(choices, 0, 1) == 2  # all accepted: nothing carried
    assert block_width(choices, 9, 1) == 8  # more than the largest holds: the largest
