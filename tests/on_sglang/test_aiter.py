"""The aiter attention backend (AiterAttnBackend) at a plugin's verify width, on the real source.

Every test builds the installed release's own AiterAttnBackend (aiter absent,
see aiter_harness), drives its own metadata functions and its own
forward_extend, and compares the attention with attention computed from the
batch definition. Patches are applied directly (unit.apply_all) and reverted.
"""

from sglang_spec_plugins.testing import aiter as aiter_harness  # first: sets TRITON_INTERPRET before triton is imported
from batch_checks import bad_batches, refused_by_the_patches_only
import pytest
import torch

from sglang_spec_plugins.engine.probe import probe
from sglang_spec_plugins.errors import EngineError
from sglang_spec_plugins.patches import aiter as aiter_patches
from sglang_spec_plugins.patches.unit import apply_all, plan_all, revert_all
from sglang_spec_plugins.verify_layout import VerifyLayoutError

RELEASE = probe().version
NDT = 4
MAX_BS = 6
MODES = ("eager", "capture", "replay")
PLANS = {name: plan.verdict for name, plan in plan_all(aiter_patches.PATCHES, RELEASE).items()}

# What each patch fixes, by metadata path (evidence: upstream is wrong there iff one applies).
FIXES = {
    "aiter.eager_width": {"eager"},
    "aiter.graph_width": {"capture", "replay"},
    "aiter.graph_width_capture": {"capture", "replay"},
    "aiter.graph_width_replay": {"replay"},
    "aiter.seqused_k": set(MODES),
}
# aiter.chain_mask / aiter.chain_mask_capture act on the default path only: see the tests of that path below.

# The verdicts read off each release's source (shared/sglang-compat.md); other releases: any non-refused plan.
A, N = "apply", "not needed"
EXPECTED = {
    "0.5.12.post1": dict(eager_width=A, eager_check=N, graph_width=N, graph_width_capture=A, graph_width_replay=A, algorithm=A, chain_mask=A, chain_mask_capture=A, seqused_k=A),
    "0.5.13": dict(eager_width=A, eager_check=N, graph_width=A, graph_width_capture=N, graph_width_replay=N, algorithm=A, chain_mask=A, chain_mask_capture=N, seqused_k=A),
    "0.5.14": dict(eager_width=A, eager_check=N, graph_width=A, graph_width_capture=N, graph_width_replay=N, algorithm=A, chain_mask=A, chain_mask_capture=N, seqused_k=A),
    "0.5.16": dict(eager_width=A, eager_check=N, graph_width=A, graph_width_capture=N, graph_width_replay=N, algorithm=A, chain_mask=A, chain_mask_capture=N, seqused_k=A),
    "0.5.17": dict(eager_width=N, eager_check=A, graph_width=N, graph_width_capture=N, graph_width_replay=N, algorithm=A, chain_mask=A, chain_mask_capture=N, seqused_k=N),
    "0.5.19": dict(eager_width=A, eager_check=N, graph_width=N, graph_width_capture=N, graph_width_replay=N, algorithm=A, chain_mask=A, chain_mask_capture=N, seqused_k=A),
    "0.5.21": dict(eager_width=N, eager_check=A, graph_width=N, graph_width_capture=N, graph_width_replay=N, algorithm=A, chain_mask=A, chain_mask_capture=N, seqused_k=N),
    "0.5.23": dict(eager_width=N, eager_check=A, graph_width=N, graph_width_capture=N, graph_width_replay=N, algorithm=A, chain_mask=A, chain_mask_capture=N, seqused_k=N),
}


@pytest.fixture
def make(monkeypatch):
    """``make(**kw)`` -> an aiter_harness.Harness; its published config is undone after the test."""
    made = []

    def build(**kw):
        made.append(aiter_harness.Harness(monkeypatch, **{"ndt": NDT, **kw}))
        return made[-1]

    yield build
    for harness in made:
        harness.close()


@pytest.fixture
def patched():
    yield apply_all(aiter_patches.PATCHES, RELEASE)
    revert_all(aiter_patches.PATCHES)


def correct(harness, mode, batch):
    out, _ = harness.run(mode, batch, MAX_BS)
    return torch.allclose(out, batch.expected(harness), atol=1e-5)


def random_batch(harness, seed, width):
    gen = torch.Generator().manual_seed(seed)
    bs = int(torch.randint(1, MAX_BS + 1, (1,), generator=gen))
    prefix = torch.randint(0, aiter_harness.CONTEXT_LEN - NDT, (bs,), generator=gen).tolist()
    return harness.batch(prefix, width, seed)


def test_plans_follow_the_release():
    assert "refused" not in PLANS.values(), PLANS
    if RELEASE in EXPECTED:
        assert {k.removeprefix("aiter."): v for k, v in PLANS.items() if k != "aiter.mla_refusal"} == EXPECTED[RELEASE]
    assert PLANS["aiter.mla_refusal"] == "apply"


def test_unknown_shapes_are_refused():
    for patch in aiter_patches.PATCHES:
        assert patch.assess(patch.alternatives[0], "def f(self):\n    pass\n", "9.9").verdict == "refused", patch.name


@pytest.mark.parametrize("mode", MODES)
def test_upstream_at_a_width_other_than_ndt(make, mode):
    """Evidence: unpatched, a batch of width 2 (ndt 4) is attended correctly
    exactly where no patch applies on this release."""
    harness = make(page_size=16)
    needed = sorted(n for n, fixed in FIXES.items() if mode in fixed and PLANS[n] == "apply")
    assert correct(harness, mode, harness.batch([5, 40, 0], 2)) == (not needed), needed


@pytest.mark.parametrize("width", range(1, NDT + 1))
@pytest.mark.parametrize("page_size", (1, 16))
@pytest.mark.parametrize("mode", MODES)
def test_patched_matches_the_batch_definition(make, patched, mode, page_size, width):
    """Oracle: every width 1..ndt, random batch size and prefixes; every path matches."""
    harness = make(page_size=page_size)
    batch = random_batch(harness, seed=10 * width + page_size, width=width)
    out, meta = harness.run(mode, batch, MAX_BS)
    torch.testing.assert_close(out, batch.expected(harness), atol=1e-5, rtol=0)
    assert meta.max_q_len == batch.width


@pytest.mark.parametrize("name", [n for n in FIXES if PLANS[n] == "apply"] or [pytest.param(None, marks=pytest.mark.skip("no aiter patch applies"))])
def test_each_patch_is_needed(make, name):
    """With every patch but ``name`` applied, some path it fixes goes wrong."""
    others = [p for p in aiter_patches.PATCHES if p.name != name]
    apply_all(others, RELEASE)
    try:
        harness = make(page_size=16)
        wrong = [m for m in sorted(FIXES[name]) if not correct(harness, m, harness.batch([5, 40, 0], 2))]
    finally:
        revert_all(others)
    assert wrong, f"{name} changes nothing on SGLang {RELEASE}"


@pytest.mark.parametrize("mode", MODES)
def test_builtin_width_metadata_is_unchanged(make, mode):
    """Width == ndt (built-in algorithms): patched metadata equals unpatched, field by field."""
    harness = make(page_size=16)
    batch = harness.batch([5, 40, 0, 17], NDT)
    out, meta = harness.run(mode, batch, MAX_BS)
    before = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in vars(meta).items()}
    apply_all(aiter_patches.PATCHES, RELEASE)
    try:
        out_patched, meta_patched = harness.run(mode, batch, MAX_BS)
    finally:
        revert_all(aiter_patches.PATCHES)
    after = vars(meta_patched)
    assert before.keys() == after.keys()
    for key, value in before.items():
        if torch.is_tensor(value):
            assert torch.equal(value, after[key]), key
        else:
            assert value == after[key], key
    assert torch.equal(out, out_patched)


# -- the default verify path (no SGLANG_USE_AITER_UNIFIED_ATTN): Triton extend_attention_fwd with a custom mask --

def runner_capture_input(harness):
    """The verify input the graph runner captures a chain with on aiter: DFLASH's,
    carrying the runner's custom-mask buffer (all ones, as the runner allocates it)."""
    import types

    return types.SimpleNamespace(draft_token_num=NDT, custom_mask=torch.ones(MAX_BS * NDT * aiter_harness.CONTEXT_LEN, dtype=torch.bool),
                                 topk=1, positions=None)


@pytest.mark.parametrize("capture_mask", (True, False), ids=("captured-with-the-runner-mask", "captured-maskless"))
@pytest.mark.parametrize("width", (2, 3, NDT))
@pytest.mark.parametrize("mode", MODES)
def test_default_path_serves_a_maskless_chain_worker(make, sbd, mode, width, capture_mask):
    """Oracle on aiter's default verify path: a chain worker whose verify input carries
    no custom mask (the loader applied every patch) attends as the batch defines,
    eager, at capture and at replay."""
    harness = make(page_size=16, unified=False, spec_algorithm=sbd(width))
    batch = random_batch(harness, seed=7 * width, width=width)
    out, meta = harness.run(mode, batch, MAX_BS, capture_spec_info=runner_capture_input(harness) if capture_mask else None)
    torch.testing.assert_close(out, batch.expected(harness), atol=1e-5, rtol=0)
    assert meta.max_extend_len == width


def test_default_path_replay_crashes_on_a_maskless_chain_unpatched(make, sbd):
    """Evidence: unpatched, the first replay of a maskless chain worker fails in the release's graph metadata."""
    from sglang_spec_plugins.patches import PATCHES, revert_all

    algorithm = sbd(2)
    revert_all(PATCHES)  # the loader applied them; this is the unpatched release
    harness = make(page_size=16, unified=False, spec_algorithm=algorithm)
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'shape'"):
        harness.run("replay", harness.batch([5, 40, 0], 2), MAX_BS, capture_spec_info=runner_capture_input(harness))


def test_default_path_refuses_a_maskless_tree(make, sbd, monkeypatch):
    """A tree worker must send its mask: the graph metadata says so, naming the plugin."""
    algorithm = sbd(2)
    monkeypatch.setattr(type(algorithm), "verify_shape", "tree")
    harness = make(page_size=16, unified=False, spec_algorithm=algorithm)
    with pytest.raises(EngineError, match=r"algorithm SBD \(plugin 'sbd'\) declares verify_shape='tree' but its verify input carries no custom mask"):
        harness.run("replay", harness.batch([5, 40, 0], 2), MAX_BS, capture_spec_info=runner_capture_input(harness))


BAD_BATCHES = bad_batches("aiter TARGET_VERIFY", requests=2)


@pytest.mark.parametrize("case", BAD_BATCHES)
def test_bad_batch_is_refused_before_the_layout(make, sbd, case):
    """A non-uniform batch, or one above the plugin's maximum width, raises on
    every release; unpatched, the release lays it out without a word."""
    tokens, message = BAD_BATCHES[case]
    harness = make(spec_algorithm=sbd(2))  # the loader has applied every patch
    fb = harness.batch([5, 9], 2).forward_batch(harness)
    fb.input_ids = torch.zeros(tokens, dtype=torch.int64)
    refused_by_the_patches_only(lambda: harness.eager(harness.backend(), fb), message)


@pytest.mark.parametrize("width", [2, 6], ids=["below ndt", "above ndt"])
def test_mla_refuses_a_plugin_width_other_than_ndt(make, patched, sbd, width):
    harness = make(mla=True, spec_algorithm=sbd(width))
    with pytest.raises(EngineError, match=rf"algorithm SBD \(plugin 'sbd'\) verifies {width} tokens.*AiterAttnBackend.*MLA.*speculative_num_draft_tokens=4"):
        harness.backend()


def test_mla_draft_worker_that_never_verifies_builds(make, patched, sbd):
    harness = make(mla=True, spec_algorithm=sbd(2))
    harness.runner.is_draft_worker = True
    assert harness.backend().use_mla


def test_mla_unpatched_builds_silently_at_a_wrong_width(make, sbd):
    """Evidence: without the patch, the MLA backend accepts the plugin and keeps ndt."""
    from sglang_spec_plugins.patches import PATCHES, revert_all

    algorithm = sbd(2)
    revert_all(PATCHES)  # the loader applied them; this is the unpatched release
    backend = make(mla=True, spec_algorithm=algorithm).backend()
    assert backend.use_mla and backend.num_draft_tokens == NDT


@pytest.mark.parametrize("mla", (True, False))
def test_backend_builds_where_the_width_is_supported(make, patched, sbd, mla):
    """MLA at width == ndt, non-MLA at any width, and a built-in algorithm all build."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algorithm = sbd(NDT if mla else 2)
    assert make(mla=mla, spec_algorithm=algorithm).backend().use_mla == mla
    assert make(mla=mla, spec_algorithm=SpeculativeAlgorithm.EAGLE).backend().use_mla == mla
