"""SBD's own tests of its plugin (no torch, no SGLang); the conformance kit (pyproject.toml) adds its checks."""

import pytest

from sbd_drafter import plugin
from sbd_drafter.blocks import block_drafts, block_width

M = 255


def test_width_is_the_setting_else_num_draft_tokens():
    assert plugin.sgl_spec_verify_width("SBD", 16, {"verify_width": 8}) == 8
    assert plugin.sgl_spec_verify_width("SBD", 16, {}) == 16


def test_other_algorithms_are_not_answered():
    assert plugin.sgl_spec_verify_width("DFLASH_BLOCK", 16, {"verify_width": 8}) is None


@pytest.mark.parametrize("settings, key", [
    ({"mask_block": 0}, "mask_block"), ({"mask_block": True}, "mask_block"), ({"mask_block": 1.0}, "mask_block"),
    ({"mask_token_id": -1}, "mask_token_id"), ({"mask_token_id": "7"}, "mask_token_id"),
    ({"mask_token_id": False}, "mask_token_id"),
])
def test_bad_settings_are_refused_naming_the_key(settings, key):
    with pytest.raises(ValueError, match=rf"^\[algorithms\.SBD\] {key} = "):
        plugin.sgl_spec_verify_width("SBD", 4, settings)


def test_mask_token_defaults_to_the_last_id_and_must_lie_in_the_vocabulary():
    assert plugin.block_settings({}, 256) == (255, 1)
    assert plugin.block_settings({}) == (None, 1)
    assert plugin.block_settings({"mask_token_id": 7, "mask_block": 3}, 256) == (7, 3)
    assert plugin.block_settings({"mask_token_id": 300}) == (300, 1)  # the vocabulary is not known yet
    with pytest.raises(ValueError, match=r"^\[algorithms\.SBD\] mask_token_id = 256: it must be an int in \[0, 256\)"):
        plugin.block_settings({"mask_token_id": 256}, 256)


def test_drafts_are_the_guesses_cut_or_padded_with_the_mask():
    assert block_drafts([4, 5], 3, M) == [4, 5, M]
    assert block_drafts([4, 5, 6, 7], 2, M) == [4, 5]
    assert block_drafts([], 1, M) == [M]
    assert block_drafts([4], 0, M) == []


@pytest.mark.parametrize("choices, most, block, width", [
    ((2, 4, 8), 0, 1, 2),    # the first decode step: root and one mask
    ((2, 4, 8), 1, 1, 4),    # 3 needed: the smallest that holds it
    ((2, 4, 8), 3, 1, 8),
    ((2, 4, 8), 7, 1, 8),    # more than any holds: the largest (the guesses are cut)
    ((2, 4, 8), 1, 2, 4),
    ((2, 4, 8), 2, 2, 8),
    ((8,), 0, 1, 8),         # one width: fixed
    ((2, 4), 3, 1, 4),
])
def test_width_is_the_smallest_choice_holding_root_guesses_and_masks(choices, most, block, width):
    assert block_width(choices, most, block) == width
