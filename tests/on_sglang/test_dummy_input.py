"""The verify input of the dummy (warm-up) run for a plugin algorithm, built by
the release's own ``_dummy_run`` (``capture_harness.dummy_run_input``), then
laid out by the real flashinfer backend (flashinfer's autotune runs the dummy
run) and compared with attention from the batch definition.

Upstream builds no verify input for a plugin algorithm (None), and
flashinfer's TARGET_VERIFY planning then fails as it fails the capture;
``runners.dummy_run`` builds the input of the declared shape at the dummy
run's width.
"""

import pytest
import torch

import capture_harness as ch
from sglang_spec_plugins.testing import trtllm as h
from sglang_spec_plugins.patches.runners import DUMMY_RUN
from sglang_spec_plugins.patches.unit import revert_all
from test_capture_input import BS, NDT, plugin  # noqa: F401  (the fixture)


def dummy_forward(monkeypatch, algorithm, shape: str):
    """(verify input, output, reference) of a TARGET_VERIFY forward through the
    real flashinfer backend shaped as the release's dummy run lays it out."""
    gen = torch.Generator().manual_seed(7)
    ch.bind_stand_ins(monkeypatch)
    monkeypatch.setenv("SGLANG_FLASHINFER_WORKSPACE_SIZE", str(1 << 20))
    with ch.published(monkeypatch, "flashinfer", algorithm.name, NDT, BS) as server_args:
        attn = ch.build_backend("flashinfer", server_args, algorithm, BS, ch.MAX_DUMMY_WIDTH)
        info, width = ch.dummy_run_input(algorithm, server_args, attn, BS)
        prefixes = torch.randint(1, 20, (BS,), generator=gen).tolist()
        batch = h.make_batch(attn, prefixes, width, gen)
        full = torch.ones(width, width, dtype=torch.bool)  # a tree: the dummy run's own mask buffer, all ones
        blocks = [full.tril() if shape == "chain" else full] * BS
        fb = ch.forward_batch(batch, attn, info, algorithm)
        if hasattr(info, "live_seq_lens_cpu"):  # 0.5.22+: a chain verify's seq_lens_cpu are the KV lengths
            fb.seq_lens_cpu = fb.seq_lens_cpu + width
        h.init_metadata(attn, fb, "eager")
        return info, width, ch.forward(attn, fb, batch), ch.reference(batch, attn, blocks)


@pytest.mark.parametrize("shape, width", [("chain", 2), ("chain", 6), ("tree", 3), ("tree", NDT)])
def test_dummy_run_verifies_a_plugin_algorithm_through_flashinfer(monkeypatch, plugin, shape, width):
    algorithm = plugin(shape, width)
    info, dummy_width, out, ref = dummy_forward(monkeypatch, algorithm, shape)
    built_in = "DFlashVerifyInput" if shape == "chain" else "EagleVerifyInput"
    assert (type(info).__name__, info.draft_token_num, dummy_width) == (built_in, width, width)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def test_dummy_run_fails_flashinfer_without_the_patch(monkeypatch, plugin):
    algorithm = plugin("chain", 2)
    revert_all([DUMMY_RUN])
    with pytest.raises((AssertionError, TypeError)) as failed:  # prefix_lens is None (asserted from 0.5.14)
        dummy_forward(monkeypatch, algorithm, "chain")
    assert failed.traceback[-1].path.name == "flashinfer_backend.py" and "prefix_lens" in str(failed.traceback[-1])


@pytest.mark.parametrize("name", ["DFLASH", "EAGLE"])
def test_built_in_algorithms_get_the_release_s_own_dummy_input(monkeypatch, plugin, name):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    plugin("chain", 2)  # the loader's patches applied
    algorithm = SpeculativeAlgorithm.from_string(name)
    ch.bind_stand_ins(monkeypatch)
    monkeypatch.setenv("SGLANG_FLASHINFER_WORKSPACE_SIZE", str(1 << 20))
    with ch.published(monkeypatch, "flashinfer", name, NDT, BS) as server_args:
        attn = ch.build_backend("flashinfer", server_args, algorithm, BS, ch.MAX_DUMMY_WIDTH)
        patched = ch.dummy_run_input(algorithm, server_args, attn, BS)
        revert_all([DUMMY_RUN])
        upstream = ch.dummy_run_input(algorithm, server_args, attn, BS)
    assert patched[1] == upstream[1] == NDT
    assert type(patched[0]) is type(upstream[0]) and patched[0].draft_token_num == upstream[0].draft_token_num == NDT
