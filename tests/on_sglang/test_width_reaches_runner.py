"""The plugin's width and draft answers reach SGLang's own width code."""

import types

import pytest

from test_loader import EXAMPLES, spec_algorithm


@pytest.fixture
def published():
    """Publish a runtime config the way SGLang's own tests do (0.5.17+)."""
    from sglang.srt.runtime_context import get_context

    overrides = []

    def publish(**fields):
        override = get_context().override_server_args(**fields)
        override.install()
        overrides.append(override)

    yield publish
    for override in reversed(overrides):
        override.restore()


def test_model_runner_and_spec_utils_use_the_plugin_width(sglang_loaded, published):
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_utils import resolve_num_tokens_per_req

    sglang_loaded(EXAMPLES)
    published(speculative_algorithm="SBD", speculative_num_draft_tokens=16)
    sbd = spec_algorithm().from_string("SBD")
    assert resolve_num_tokens_per_req(phase="target_verify", spec_algorithm=sbd) == 8
    runner = types.SimpleNamespace(spec_algorithm=sbd, is_draft_worker=False)
    assert ModelRunner.decode_num_tokens_per_req(runner) == 8
    assert ModelRunner.decode_num_tokens_per_req(runner, num_draft_tokens=4) == 8


def test_draft_worker_width_and_permission(sglang_loaded, published):
    from sglang.srt.model_executor.model_runner import ModelRunner

    sglang_loaded(EXAMPLES)
    published(speculative_algorithm="DFLASH_BLOCK", speculative_num_draft_tokens=16)
    block = spec_algorithm().from_string("DFLASH_BLOCK")
    assert block.supports_target_verify_for_draft() is True
    draft_runner = types.SimpleNamespace(spec_algorithm=block, is_draft_worker=True)
    assert ModelRunner.decode_num_tokens_per_req(draft_runner) == 16
    assert spec_algorithm().from_string("SBD").supports_target_verify_for_draft() is False


def test_a_stock_registration_would_give_sglangs_default(sglang_loaded, published):
    """Control: the same name registered without the loader answers ndt, so
    the 8 above comes from the plugin."""
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative import spec_registry

    spec_registry.register_algorithm("SBD")(lambda server_args: object)
    try:
        published(speculative_algorithm="SBD", speculative_num_draft_tokens=16)
        runner = types.SimpleNamespace(spec_algorithm=spec_algorithm().from_string("SBD"), is_draft_worker=False)
        assert ModelRunner.decode_num_tokens_per_req(runner) == 16
    finally:
        spec_registry._REGISTRY.pop("SBD", None)


def test_cuda_graph_runner_captures_at_the_plugin_width(sglang_loaded, published):
    from runner_drive import graph_runner_width
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    sglang_loaded(EXAMPLES)
    published(speculative_algorithm="SBD", speculative_num_draft_tokens=16)
    from sglang.srt.runtime_context import get_context

    server_args = get_context().server_args
    SA = spec_algorithm()
    assert graph_runner_width(SA.from_string("SBD"), False, server_args) == (8, ForwardMode.TARGET_VERIFY)
    assert graph_runner_width(SA.from_string("DFLASH_BLOCK"), True, server_args) == (16, ForwardMode.TARGET_VERIFY)
    with pytest.raises(RuntimeError, match="This should not happen"):
        graph_runner_width(SA.from_string("SBD"), True, server_args)  # SBD's draft worker may not verify


def test_dummy_run_uses_the_plugin_width(sglang_loaded, published):
    from runner_drive import dummy_run_width

    sglang_loaded(EXAMPLES)
    published(speculative_algorithm="SBD", speculative_num_draft_tokens=16)
    SA = spec_algorithm()
    assert dummy_run_width(SA.from_string("SBD"), False) == 8
    assert dummy_run_width(SA.from_string("DFLASH_BLOCK"), True) == 16
    with pytest.raises(AssertionError, match="This should not happen"):
        dummy_run_width(SA.from_string("SBD"), True)
