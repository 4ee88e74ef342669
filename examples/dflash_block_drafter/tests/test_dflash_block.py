"""The block drafter's own tests; the conformance kit (pyproject.toml) adds its checks."""

import pytest

from dflash_block_drafter.plugin import plugin


def test_verifies_one_block_in_the_draft_worker():
    assert plugin.sgl_spec_verify_width("DFLASH_BLOCK", {}) == 16
    assert plugin.sgl_spec_draft_may_verify("DFLASH_BLOCK") is True
    assert plugin.sgl_spec_draft_may_verify("SBD") is None


def test_refuses_other_num_draft_tokens():
    [spec] = plugin.sgl_spec_algorithms()
    with pytest.raises(ValueError, match="blocks of 16"):
        spec.validate_server_args(type("Args", (), {"speculative_num_draft_tokens": 8})())
