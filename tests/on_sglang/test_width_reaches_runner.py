"""The plugin's width and draft answers reach SGLang's own width code: the
model runner's width helper and spec_utils where the release has them, the
decode CUDA-graph runner and the dummy run on every release."""

import contextlib
import importlib
import inspect

import pytest

import runner_drive
from runner_drive import dummy_run_width, graph_runner_width, target_verify
from sglang_spec_plugins.engine.probe import probe
from test_loader import EXAMPLES, spec_algorithm

SBD_AT_16 = dict(speculative_algorithm="SBD", speculative_num_draft_tokens=16)


@pytest.fixture
def published():
    """``publish(**fields)``: a real ServerArgs carrying ``fields``, published
    where the release reads it (see runner_drive.published); undone after."""
    with contextlib.ExitStack() as stack:
        yield lambda **fields: stack.enter_context(runner_drive.published(**fields))


def width_helper(algo, is_draft_worker, server_args):
    """The release's ModelRunner width helper bound to a model runner, or None
    (it came in 0.5.15)."""
    mr = runner_drive.model_runner(algo, is_draft_worker, server_args)
    return getattr(mr, "decode_num_tokens_per_req", None) or getattr(mr, "decode_num_tokens_per_bs", None)


def test_model_runner_helper_uses_the_plugin_width(sglang_loaded, published):
    sglang_loaded(EXAMPLES)
    server_args = published(**SBD_AT_16)
    helper = width_helper(spec_algorithm().from_string("SBD"), False, server_args)
    if helper is None:
        pytest.skip(f"SGLang {probe().version} has no ModelRunner width helper (it came in 0.5.15)")
    assert helper() == 8
    assert helper(num_draft_tokens=4) == 8


def test_spec_utils_uses_the_plugin_width(sglang_loaded, published):
    spec_utils = importlib.import_module("sglang.srt.speculative.spec_utils")
    resolve = getattr(spec_utils, "resolve_num_tokens_per_req", None)
    if resolve is None:
        pytest.skip(f"SGLang {probe().version} has no spec_utils.resolve_num_tokens_per_req (it came in 0.5.16)")
    sglang_loaded(EXAMPLES)
    server_args = published(**SBD_AT_16)
    sbd = spec_algorithm().from_string("SBD")
    # 0.5.16-0.5.18 take server_args; later releases read the published config.
    extra = {"server_args": server_args} if "server_args" in inspect.signature(resolve).parameters else {}
    assert resolve(phase="target_verify", spec_algorithm=sbd, **extra) == 8


def test_cuda_graph_runner_captures_at_the_plugin_width(sglang_loaded, published):
    sglang_loaded(EXAMPLES)
    server_args = published(**SBD_AT_16)
    SA = spec_algorithm()
    assert graph_runner_width(SA.from_string("SBD"), False, server_args) == (8, target_verify())
    with pytest.raises(RuntimeError, match="This should not happen"):
        graph_runner_width(SA.from_string("SBD"), True, server_args)  # SBD's draft worker may not verify


def test_dummy_run_uses_the_plugin_width(sglang_loaded, published):
    sglang_loaded(EXAMPLES)
    server_args = published(**SBD_AT_16)
    SA = spec_algorithm()
    assert dummy_run_width(SA.from_string("SBD"), False, server_args) == (8, target_verify())
    # The dummy run's gate raises RuntimeError up to 0.5.15, fails an assert from 0.5.16.
    with pytest.raises((RuntimeError, AssertionError), match="This should not happen"):
        dummy_run_width(SA.from_string("SBD"), True, server_args)


def test_draft_worker_width_and_permission(sglang_loaded, published):
    sglang_loaded(EXAMPLES)
    server_args = published(speculative_algorithm="DFLASH_BLOCK", speculative_num_draft_tokens=16)
    SA = spec_algorithm()
    block = SA.from_string("DFLASH_BLOCK")
    assert block.supports_target_verify_for_draft() is True
    assert SA.from_string("SBD").supports_target_verify_for_draft() is False
    assert graph_runner_width(block, True, server_args) == (16, target_verify())
    assert dummy_run_width(block, True, server_args) == (16, target_verify())
    helper = width_helper(block, True, server_args)
    assert helper is None or helper() == 16


def test_a_stock_registration_would_give_sglangs_default(published):
    """Control: the same name registered without the loader verifies ndt
    tokens, so the 8 above comes from the plugin."""
    from sglang.srt.speculative import spec_registry

    spec_registry.register_algorithm("SBD")(lambda server_args: object)
    try:
        server_args = published(**SBD_AT_16)
        sbd = spec_algorithm().from_string("SBD")
        assert graph_runner_width(sbd, False, server_args) == (16, target_verify())
        assert dummy_run_width(sbd, False, server_args) == (16, target_verify())
        helper = width_helper(sbd, False, server_args)
        assert helper is None or helper() == 16
    finally:
        spec_registry._REGISTRY.pop("SBD", None)
