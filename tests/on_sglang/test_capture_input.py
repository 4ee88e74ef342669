"""The verify input SGLang's decode CUDA-graph runner captures TARGET_VERIFY
with, for a plugin algorithm of each declared verify shape, through the real
flashinfer, triton and trtllm_mha backends: capture, then replay with what
the plugin's worker sends, compared with attention from the batch definition
(capture_harness)."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported (see test_trtllm_mha)

import textwrap

import pytest
import torch

import capture_harness as ch
from sglang_spec_plugins.testing import trtllm as h
from sglang_spec_plugins.engine.probe import installed_version
from sglang_spec_plugins.errors import EngineError
from sglang_spec_plugins.patches import capture_input, triton
from sglang_spec_plugins.patches.unit import revert_all

NDT, MAX_WIDTH, BS = 4, 8, 3
RELEASE = installed_version()

PLUGIN = textwrap.dedent("""
    from sglang_spec_plugins import AlgorithmSpec, hookimpl

    class Worker:
        pass

    @hookimpl
    def sgl_spec_algorithms():
        return [AlgorithmSpec(name="CAP_CHAIN", worker_factory=lambda server_args: Worker),
                AlgorithmSpec(name="CAP_TREE", worker_factory=lambda server_args: Worker, verify_shape="tree")]

    @hookimpl
    def sgl_spec_verify_width(algorithm, settings):
        return settings["width"] if algorithm.startswith("CAP_") else None

    @hookimpl
    def sgl_spec_draft_may_verify(algorithm, settings):
        return settings["draft"] if algorithm.startswith("CAP_") else None
    """)

TOML = """
[plugins]
enable = ["cap"]
[algorithms.CAP_CHAIN]
max_tokens_per_req = {max_width}
width = {width}
draft = {draft}
[algorithms.CAP_TREE]
max_tokens_per_req = {max_width}
width = {width}
draft = false  # a tree verified by the draft worker is refused at load (see bad_inputs)
"""


@pytest.fixture
def plugin(site, sglang_loaded):
    """``plugin(shape, width, draft=False)``: the plugin algorithm of that verify
    shape (CAP_CHAIN's draft worker verifies if ``draft``), loaded through SGLang."""
    site.add("cap-drafter", {"cap": "cap_mod"}, {"cap_mod": PLUGIN})

    def load(shape: str, width: int, draft: bool = False):
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        sglang_loaded(TOML.format(max_width=MAX_WIDTH, width=width, draft=str(draft).lower()))
        return SpeculativeAlgorithm.from_string(f"CAP_{shape.upper()}")

    return load


def capture_then_replay(monkeypatch, algorithm, backend: str, shape: str, width: int, seed: int, chain_mask=False):
    """(output, reference) of a replay after a capture, on the real ``backend``;
    a chain worker sends its causal mask only if ``chain_mask``."""
    gen = torch.Generator().manual_seed(seed)
    ch.bind_stand_ins(monkeypatch)
    monkeypatch.setenv("SGLANG_FLASHINFER_WORKSPACE_SIZE", str(1 << 20))
    with ch.published(monkeypatch, backend, algorithm.name, NDT, BS) as server_args:
        attn = ch.build_backend(backend, server_args, algorithm, BS, MAX_WIDTH)
        info, captured_width = ch.capture_input(algorithm, server_args, attn, BS * width, BS)
        assert captured_width == width
        capture = h.make_batch(attn, [0] * BS, width, gen)  # the runner captures with empty prefixes
        fb = ch.forward_batch(capture, attn, info, algorithm)
        h.init_metadata(attn, fb, "capture")
        ch.forward(attn, fb, capture)  # the capture's own forward
        prefixes = torch.randint(1, 20, (BS,), generator=gen).tolist()
        batch = h.make_batch(attn, prefixes, width, gen)
        blocks = (ch.tree_blocks(BS, width, gen) if shape == "tree"
                  else [torch.ones(width, width, dtype=torch.bool).tril()] * BS)
        mask = ch.flat_mask(prefixes, blocks) if shape == "tree" or chain_mask else None
        fb = ch.forward_batch(batch, attn, ch.worker_input(shape, width, mask), algorithm)
        if hasattr(fb.spec_info, "live_seq_lens_cpu"):  # 0.5.22+: a chain verify's seq_lens_cpu are the KV lengths
            fb.seq_lens_cpu = fb.seq_lens_cpu + width
        h.init_metadata(attn, fb, "replay")
        return ch.forward(attn, fb, batch), ch.reference(batch, attn, blocks)


@pytest.mark.parametrize("shape", ["chain", "tree"])
@pytest.mark.parametrize("width", [2, NDT, 6])
def test_flashinfer_captures_and_replays_a_plugin_algorithm(monkeypatch, plugin, shape, width):
    algorithm = plugin(shape, width)
    out, ref = capture_then_replay(monkeypatch, algorithm, "flashinfer", shape, width, seed=width)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_flashinfer_capture_fails_without_the_patch(monkeypatch, plugin, shape):
    algorithm = plugin(shape, NDT)
    revert_all([capture_input.CAPTURE_INPUT])
    with pytest.raises((AssertionError, TypeError)) as failed:  # prefix_lens is None (asserted from 0.5.14)
        capture_then_replay(monkeypatch, algorithm, "flashinfer", shape, NDT, seed=1)
    assert failed.traceback[-1].path.name == "flashinfer_backend.py" and "prefix_lens" in str(failed.traceback[-1])


def triton_takes_the_hook() -> bool:
    """0.5.17+: triton lays TARGET_VERIFY out at the verify input's (0.5.17-0.5.20) or the algorithm's width
    (below, refused unless = ndt)."""
    return triton.TRITON.plan(RELEASE).verdict == "not needed"


@pytest.mark.parametrize("shape", ["chain", "tree"])
@pytest.mark.parametrize("width", [2, NDT, 6])
def test_triton_captures_and_replays_a_plugin_algorithm(monkeypatch, plugin, shape, width):
    algorithm = plugin(shape, width)
    if width != NDT and not triton_takes_the_hook():
        with pytest.raises(EngineError, match="triton"):  # refused when the backend is built (patches.triton)
            capture_then_replay(monkeypatch, algorithm, "triton", shape, width, seed=width)
        return
    out, ref = capture_then_replay(monkeypatch, algorithm, "triton", shape, width, seed=width)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def release_captures_triton_with_a_chain_mask() -> bool:
    """Up to 0.5.13 SGLang's DFLASH mask policy gives triton a custom mask (its worker sends one, and
    the CUDA-graph runner captures the mask buffer); from 0.5.14 triton verifies DFLASH causally."""
    from sglang.srt.speculative import dflash_utils

    return "TritonAttnBackend" not in dflash_utils._DFLASH_VERIFY_SKIP_CUSTOM_MASK_BACKENDS


@pytest.mark.parametrize("chain_mask", [False, True], ids=["no mask", "causal mask"])
def test_triton_replays_a_chain_whether_or_not_the_worker_sends_its_mask(monkeypatch, plugin, chain_mask):
    """A chain is captured on triton without a mask (causal within the block), so a replay is right
    with the worker's causal mask (as DFLASH's worker sends it up to 0.5.13) or without."""
    algorithm = plugin("chain", NDT)
    out, ref = capture_then_replay(monkeypatch, algorithm, "triton", "chain", NDT, seed=5, chain_mask=chain_mask)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def test_triton_chain_captured_with_the_release_s_mask_replays_wrong_without_one(monkeypatch, plugin):
    """Where the release's DFLASH policy captures triton with the mask buffer (up to 0.5.13), a chain
    captured that way and replayed without a mask reads the stale buffer: wrong. The loader captures
    a chain there without the mask (capture_input._CAUSAL_WITHOUT_MASK)."""
    algorithm = plugin("chain", NDT)
    monkeypatch.setattr(capture_input, "_CAUSAL_WITHOUT_MASK", frozenset())
    out, ref = capture_then_replay(monkeypatch, algorithm, "triton", "chain", NDT, seed=5)
    assert torch.allclose(out, ref, atol=1e-4) != release_captures_triton_with_a_chain_mask()


def test_triton_tree_replays_without_its_mask_unpatched(monkeypatch, plugin):
    """Without the patch triton captures a tree algorithm with no custom mask, so
    the replays of the worker's tree batches attend causally: wrong."""
    algorithm = plugin("tree", NDT)
    revert_all([capture_input.CAPTURE_INPUT])
    out, ref = capture_then_replay(monkeypatch, algorithm, "triton", "tree", NDT, seed=3)
    assert not torch.allclose(out, ref, atol=1e-2)


@pytest.mark.parametrize("width", [2, NDT, 6])
def test_trtllm_mha_captures_and_replays_a_chain_algorithm(monkeypatch, plugin, width):
    algorithm = plugin("chain", width)
    out, ref = capture_then_replay(monkeypatch, algorithm, "trtllm_mha", "chain", width, seed=width)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_the_captured_input_asks_the_target_for_no_hidden_states(monkeypatch, plugin, shape):
    """A graph captured with the built-in input's hidden-state mode (DFLASH and
    EAGLE ask for every token's) makes the runner recapture every graph at each
    verify that asks less (``recapture_if_needed``), and the capture sets the
    borrowed mode back: on a real 0.5.16 engine a model-free plugin worker was
    recaptured at every decode step. Captured asking none, such a worker replays."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    algorithm = plugin(shape, NDT)
    ch.bind_stand_ins(monkeypatch)
    monkeypatch.setenv("SGLANG_FLASHINFER_WORKSPACE_SIZE", str(1 << 20))
    with ch.published(monkeypatch, "flashinfer", algorithm.name, NDT, BS) as server_args:
        attn = ch.build_backend("flashinfer", server_args, algorithm, BS, MAX_WIDTH)
        info, _ = ch.capture_input(algorithm, server_args, attn, BS * NDT, BS)
        assert info.draft_token_num == NDT and info.capture_hidden_mode == CaptureHiddenMode.NULL
