"""``attention_support`` on the installed release against what each backend
does, written down per release from the wheels (sglang-compat.md,
docs/operators/attention-backends.md) and from the oracle tests, rather than from the probes
that ``attention_support`` reads: a probe that misreads a release shows up
here as a wrong verdict.

Widths 2, NDT and 6 stand for below, equal to and above ndt (the verdicts
depend on nothing else).
"""

import pytest
from packaging.version import Version

from sglang_spec_plugins.engine.probe import installed_version
from sglang_spec_plugins.patches.attention_support import KNOWN_BACKENDS, attention_support

NDT = 4
RELEASE = Version(installed_version())
S, P, R = "served", "patched", "refused"


def expected(backend, width, shape, draft):
    """The verdict, per release, for a plugin algorithm of ``shape`` at ``width`` on ``backend``."""
    other = width != NDT
    if shape == "tree" and draft:
        return R  # SGLang captures a draft worker's TARGET_VERIFY only as a chain
    if backend == "flashinfer":
        return P  # capture and dummy run need capture_input / runners.dummy_run on every release
    if backend == "triton":
        takes_hook = RELEASE >= Version("0.5.17")  # ndt hard-coded up to 0.5.16; the verify input's 0.5.17-0.5.20
        if other and not takes_hook:
            return R
        if shape == "tree":
            return R if width > NDT else P  # mask buffer sized from ndt; capture_input gives the mask
        return S
    if backend == "trtllm_mha":
        return R if shape == "tree" else (P if other else S)  # causal only; width patched on every release
    if backend in ("fa3", "fa4"):
        draft_takes_hook = draft and RELEASE >= Version("0.5.16")
        if other and not draft_takes_hook:
            return R
        return R if shape == "tree" else S
    if backend == "aiter":
        return P if other or shape == "tree" else S  # a width patch or eager_check applies on every release
    # aiter MLA (fixed draft length), and every backend not examined: a chain at ndt only
    return S if shape == "chain" and not other else R


BACKENDS = list(KNOWN_BACKENDS) + ["torch_native", "flex_attention", "flashinfer_mla", "trtllm_mla", "a_future_backend"]


@pytest.mark.parametrize("draft", [False, True], ids=["target", "draft"])
@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_every_backend_width_and_shape(shape, draft):
    got = {(b, w): attention_support(b, w, NDT, shape, is_draft_worker=draft).verdict
           for b in BACKENDS for w in (2, NDT, 6)}
    assert got == {(b, w): expected(b, w, shape, draft) for b in BACKENDS for w in (2, NDT, 6)}


def test_reasons_say_why():
    assert "causal mask only" in attention_support("trtllm_mha", NDT, NDT, "tree").reason
    assert "not examined" in attention_support("torch_native", 2, NDT).reason
    assert "draft worker" in attention_support("flashinfer", NDT, NDT, "tree", is_draft_worker=True).reason
    assert "speculative_num_draft_tokens" in attention_support("fa3", 2, NDT).reason
