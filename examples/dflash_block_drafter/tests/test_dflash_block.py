"""The block drafter's hooks; the conformance kit (pyproject.toml) adds its checks, and
tests/on_sglang/test_draft_model_serve.py serves it through SGLang's real scheduler."""

import pytest

from dflash_block_drafter.plugin import plugin
from sglang_spec_plugins import DraftModel


def test_the_draft_runner_drafts_the_block_and_the_target_verifies_its_first_verify_width():
    assert plugin.sgl_spec_verify_width("DFLASH_BLOCK", 16, True, {"verify_width": 4}) == 16
    assert plugin.sgl_spec_verify_width("DFLASH_BLOCK", 16, False, {"verify_width": 4}) == 4
    assert plugin.sgl_spec_verify_width("DFLASH_BLOCK", 16, False, {}) == 16
    assert plugin.sgl_spec_verify_width("DFLASH_BLOCK", 16, True, {"block_size": 8}) == 8  # a block below ndt
    assert plugin.sgl_spec_verify_width("DFLASH_BLOCK", 16, False, {"block_size": 8}) == 8
    assert plugin.sgl_spec_verify_width("SBD", 16, False, {}) is None
    assert plugin.sgl_spec_draft_may_verify("DFLASH_BLOCK") is True
    assert plugin.sgl_spec_draft_may_verify("SBD") is None


@pytest.mark.parametrize("ndt, settings, message", [
    (4, {"verify_width": 8}, r"\[algorithms.DFLASH_BLOCK\] verify_width = 8: it must be an int from 1 to the block the "
                             r"draft model drafts \(4, --speculative-num-draft-tokens\)"),
    (16, {"block_size": 8, "verify_width": 12}, r"verify_width = 12: .* \(8, block_size\)"),
    (4, {"block_size": 8}, r"\[algorithms.DFLASH_BLOCK\] block_size = 8: it must be an int from 1 to "
                           r"--speculative-num-draft-tokens \(4\)"),
    (4, {"verify_width": "2"}, r"verify_width = '2': it must be an int"),
])
def test_a_width_the_worker_could_not_serve_is_refused_naming_the_key(ndt, settings, message):
    """A block above ndt (the KV slots reserved per request each step) or a verify width above the block is
    refused naming the key, not cut down in silence (the validator refuses it too, while SGLang resolves its
    arguments: tests/on_sglang/bad_inputs.py)."""
    for worker in (False, True):
        with pytest.raises(ValueError, match=message):
            plugin.sgl_spec_verify_width("DFLASH_BLOCK", ndt, worker, settings)


def test_declares_a_dflash_layout_draft_model_and_refuses_tensor_parallel_drafting():
    [spec] = plugin.sgl_spec_algorithms()
    assert spec.draft_model == DraftModel() and spec.draft_model.layout == "dflash"
    assert spec.supports_overlap is True  # the block base runs under SGLang's overlap scheduler (0.5.14+)
    spec.validate_server_args(type("Args", (), {"tp_size": 1})())
    with pytest.raises(ValueError, match=r"DFLASH_BLOCK drafts with the target's LM head on one GPU: serve it with "
                                         r"--tp-size 1, not 2"):
        spec.validate_server_args(type("Args", (), {"tp_size": 2})())
