"""SBD's own tests; the conformance kit (pyproject.toml) adds its checks."""

from sbd_drafter import plugin


def test_width_is_the_setting_else_num_draft_tokens():
    assert plugin.sgl_spec_verify_width("SBD", 16, {"verify_width": 8}) == 8
    assert plugin.sgl_spec_verify_width("SBD", 16, {}) == 16


def test_other_algorithms_are_not_answered():
    assert plugin.sgl_spec_verify_width("DFLASH_BLOCK", 16, {"verify_width": 8}) is None
