"""Both examples start on this release with the README's operator command:
SGLang's own create_worker, given the flags the README passes, returns a
worker class that fits the release's worker contract; without
any flag: both declare supports_overlap=True, and SGLang's create_worker accepts them with overlap on, as predicted;
but DFLASH_BLOCK on 0.5.14, whose overlap FutureMap decides for DFLASH alone, needs --disable-overlap-schedule
(the start-up check refuses it overlapped: test_draft_model_budget.py).
(The kit's SGLang sections, run in this process on the loaded examples.)"""

import importlib
from importlib import metadata

import pytest
from packaging.version import Version

from sglang_spec_plugins import loader
from sglang_spec_plugins.testing.on_sglang import registry_section, start_section, worker_section
from test_loader import EXAMPLES

# algorithm -> (the flag the README's operator command adds, a num_draft_tokens it uses)
README_COMMAND = {"SBD": (None, 16), "DFLASH_BLOCK": (None, 16)}
ON_0_5_14 = Version("0.5.14") <= Version(metadata.version("sglang")) < Version("0.5.15")


@pytest.mark.parametrize("name", sorted(README_COMMAND))
def test_example_starts_with_the_readme_command(sglang_loaded, name):
    if name == "SBD" and Version(metadata.version("sglang")) < Version("0.5.14"):
        pytest.skip("SBD drives the V2 schema: its validator refuses SGLang before 0.5.14 (test_cli's check says so)")
    sglang_loaded(EXAMPLES)
    report = loader.load()
    policy, offered = report.policies[name], report.plugins.algorithms[name]
    flag, ndt = README_COMMAND[name]
    if name == "DFLASH_BLOCK" and ON_0_5_14:
        flag = "--disable-overlap-schedule"  # docs/operators/serving.md
    start = start_section(name, offered, [ndt])
    assert start["problems"] == [] and start["flag"] == flag
    worker = start["worker"]
    assert worker.__name__ == {"SBD": "SBDWorker", "DFLASH_BLOCK": "DFlashBlockWorker"}[name]
    assert worker_section(name, worker)["problems"] == []
    registry = registry_section(name, policy, [ndt])
    assert registry["problems"] == []
    assert registry["spec_utils"] == hasattr(importlib.import_module("sglang.srt.speculative.spec_utils"),
                                             "resolve_num_tokens_per_req")


def test_kit_attention_check_needs_the_loaders_patches(sglang_loaded):
    """The kit's attention check on this release: SBD verifying 8 tokens at
    ndt 4 (a graph captured wider than ndt) matches reference attention
    through trtllm_mha and aiter with the loader's patches, and fails through
    trtllm_mha without them (so the check can fail)."""
    from sglang_spec_plugins.patches import PATCHES, revert_all
    from sglang_spec_plugins.testing.on_sglang import attention_section

    sglang_loaded(EXAMPLES)
    policy = loader.load().policies["SBD"]
    patched = attention_section("SBD", policy, [4])
    assert patched["checked"] == {"trtllm_mha": [8], "aiter": [8]} and patched["problems"] == []
    revert_all(PATCHES)
    unpatched = attention_section("SBD", policy, [4])["problems"]
    assert any(p.startswith("trtllm_mha, num_draft_tokens=4, width 8: ") for p in unpatched), unpatched
