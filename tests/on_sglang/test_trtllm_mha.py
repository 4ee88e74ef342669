"""trtllm_mha TARGET_VERIFY metadata at a width other than
speculative_num_draft_tokens (ndt), on the real backend (sglang_spec_plugins.testing.trtllm)."""

import os

# SGLang's Triton metadata kernels run on CPU only interpreted; triton decides
# at decoration time, so this must precede the first import of those kernels.
# On a CPU-only machine no compiled Triton kernel can run, so no other test
# loses anything by it.
os.environ.setdefault("TRITON_INTERPRET", "1")

import random

import pytest
import torch
from packaging.version import Version

from sglang_spec_plugins.testing import trtllm as h
from batch_checks import bad_batches, refused_by_the_patches_only
from sglang_spec_plugins.testing.cpu import absent_kernel_package
from sglang_spec_plugins import verify_layout
from sglang_spec_plugins.engine.probe import installed_version
from sglang_spec_plugins.patches import trtllm_mha
from sglang_spec_plugins.patches.unit import apply_all, plan_all, revert_all
from sglang_spec_plugins.verify_layout import VerifyLayoutError

NDT, MAX_BS = 4, 6
PHASES = ("eager", "capture", "replay")
RELEASE = installed_version()


@pytest.fixture
def patched():
    applied = [p for p in trtllm_mha.PATCHES if p.plan(RELEASE).verdict == "apply"]
    apply_all(applied, RELEASE)
    yield applied
    revert_all(applied)


def summary(m, bs):
    return dict(cu_seqlens_q=m.cu_seqlens_q[: bs + 1].tolist(), kv_lengths=m.cache_seqlens_int32[:bs].tolist(),
                max_seq_len_q=m.max_seq_len_q, max_seq_len_k=getattr(m, "max_seq_len_k", None))


def expected(prefixes, width):
    """From the batch definition: every request's queries are its ``width`` new tokens, its keys its prefix and them."""
    return dict(cu_seqlens_q=verify_layout.qo_indptr(len(prefixes), width),
                kv_lengths=[int(p) + width for p in prefixes], max_seq_len_q=width)


def run_phases(attn, prefixes, width, gen, replay_prefixes=None):
    """(batch, metadata summary, ok) per phase; replay uses new prefixes. ok:
    the layout is verify_layout's and attention through the metadata matches
    attention from the batch definition (not checked after a capture up to
    0.5.12.post1: its page table is filled only by the replay that precedes
    every real forward)."""
    out = {}
    for phase in PHASES:
        batch = h.make_batch(attn, replay_prefixes if phase == "replay" and replay_prefixes else prefixes, width, gen)
        m = h.init_metadata(attn, h.forward_batch(batch, attn), phase)
        got = summary(m, len(batch.prefixes))
        ok = {k: got[k] for k in ("cu_seqlens_q", "kv_lengths", "max_seq_len_q")} == expected(batch.prefixes, width)
        if ok and not (phase == "capture" and h.legacy()):
            attention = h.paged_attention(m, batch.q, *h.kv_buffers(attn), attn.page_size)
            ok = torch.allclose(attention, h.reference_attention(batch, attn), atol=1e-5, rtol=1e-4)
        out[phase] = (batch, got, ok)
    return out


def test_finding_unpatched_metadata_at_width_below_ndt(monkeypatch):
    """The finding, on the unpatched release: 3 requests of width 2, ndt 4."""
    prefixes, width = [5, 17, 3], 2
    with h.backend(monkeypatch, NDT, 16, MAX_BS) as attn:
        got = {phase: s for phase, (_, s, _) in run_phases(attn, prefixes, width, torch.Generator().manual_seed(0)).items()}
    right = expected(prefixes, width)
    if h.legacy():  # every phase reads the width from ndt
        for phase in PHASES:
            assert got[phase]["max_seq_len_q"] == NDT
            assert got[phase]["kv_lengths"] == [int(p) + NDT for p in prefixes] != right["kv_lengths"]
            assert got[phase]["cu_seqlens_q"] == verify_layout.qo_indptr(3, NDT) != right["cu_seqlens_q"]
    else:  # eager is right; graphs get the width right except cu_seqlens_q (stride ndt)
        assert got["eager"] == {**right, "max_seq_len_k": got["eager"]["max_seq_len_k"]}
        for phase in ("capture", "replay"):
            assert got[phase]["max_seq_len_q"] == width and got[phase]["kv_lengths"] == right["kv_lengths"]
            assert got[phase]["cu_seqlens_q"] == [0, 4, 8, 12] != right["cu_seqlens_q"] == [0, 2, 4, 6]


def test_plans_cover_this_release():
    plans = plan_all(trtllm_mha.PATCHES, RELEASE)
    assert "refused" not in {p.verdict for p in plans.values()}, plans
    wanted = {"trtllm_mha.fixed_width_capture", "trtllm_mha.fixed_width_replay", "trtllm_mha.fixed_width_eager"} if h.legacy() \
        else {"trtllm_mha.eager_check", "trtllm_mha.graph_cu_seqlens_q"}
    if Version(RELEASE) >= Version("0.5.21"):  # the XQA spec-decode mask (read off the wheels)
        wanted.add("trtllm_mha.xqa_mask")
    assert {n for n, p in plans.items() if p.verdict == "apply"} == wanted


@pytest.mark.parametrize("page_size", [1, 16])
def test_builtin_width_gets_the_unpatched_metadata(monkeypatch, page_size):
    prefixes, replay = [7, 30, 1, 12], [9, 2, 40, 16]

    def tensors(gen_seed):
        with h.backend(monkeypatch, NDT, page_size, MAX_BS) as attn:
            gen = torch.Generator().manual_seed(gen_seed)
            out = {}
            for phase in PHASES:
                batch = h.make_batch(attn, replay if phase == "replay" else prefixes, NDT, gen)
                m = h.init_metadata(attn, h.forward_batch(batch, attn), phase)
                # the pages the kernel reads: each row up to its key length
                lengths = m.cache_seqlens_int32[:4].tolist()
                out[phase] = (summary(m, 4), [m.page_table[i, : -(-n // page_size)].tolist() for i, n in enumerate(lengths)])
            return out

    unpatched = tensors(1)
    applied = [p for p in trtllm_mha.PATCHES if p.plan(RELEASE).verdict == "apply"]
    apply_all(applied, RELEASE)
    try:
        with_patches = tensors(1)
    finally:
        revert_all(applied)
    for phase in PHASES:
        assert with_patches[phase][0] == unpatched[phase][0], phase
        assert with_patches[phase][1] == unpatched[phase][1], phase


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("seed", range(4))
def test_oracle_patched(monkeypatch, patched, page_size, seed):
    rnd = random.Random(seed * 31 + page_size)
    bs, width = rnd.randint(1, MAX_BS), rnd.randint(1, NDT)
    prefixes = [rnd.randint(0, 60) for _ in range(bs)]
    replay = [rnd.randint(0, 60) for _ in range(bs)]
    with h.backend(monkeypatch, NDT, page_size, MAX_BS) as attn:
        results = run_phases(attn, prefixes, width, torch.Generator().manual_seed(seed), replay)
    for phase, (batch, got, ok) in results.items():
        assert ok, (phase, bs, width, got)
        if got["max_seq_len_k"] is not None:
            assert got["max_seq_len_k"] == max(batch.prefixes) + width


# The phase each layout patch fixes: with the patch off (the others on), that
# phase's attention at width 2 (ndt 4) no longer matches the batch definition.
# (trtllm_mha.eager_check changes no layout: test_bad_eager_batch_is_refused.)
PATCH_PHASE = {"trtllm_mha.fixed_width_capture": "capture", "trtllm_mha.fixed_width_replay": "replay",
               "trtllm_mha.fixed_width_eager": "eager", "trtllm_mha.graph_cu_seqlens_q": "capture"}


@pytest.mark.parametrize("patch", [p for p in trtllm_mha.PATCHES if p.name in PATCH_PHASE], ids=lambda p: p.name)
def test_each_patch_is_needed(monkeypatch, patch):
    if patch.plan(RELEASE).verdict != "apply":
        pytest.skip(f"{patch.name}: {patch.plan(RELEASE).reason}")
    others = [p for p in trtllm_mha.PATCHES if p is not patch and p.plan(RELEASE).verdict == "apply"]
    apply_all(others, RELEASE)
    try:
        with h.backend(monkeypatch, NDT, 16, MAX_BS) as attn:
            results = run_phases(attn, [5, 17, 3], 2, torch.Generator().manual_seed(0), [8, 1, 22])
        assert not results[PATCH_PHASE[patch.name]][2]
        apply_all([patch], RELEASE)
        with h.backend(monkeypatch, NDT, 16, MAX_BS) as attn:
            results = run_phases(attn, [5, 17, 3], 2, torch.Generator().manual_seed(0), [8, 1, 22])
        assert all(ok for _, _, ok in results.values())
    finally:
        revert_all([patch, *others])


def test_non_uniform_capture_is_refused(monkeypatch, patched):
    """A capture whose tokens do not split evenly over its requests raises
    (upstream would silently floor the width)."""
    with h.backend(monkeypatch, NDT, 16, MAX_BS) as attn:
        batch = h.make_batch(attn, [5, 17, 3], 2, torch.Generator().manual_seed(0))
        fb = h.forward_batch(batch, attn)
        fb.positions = torch.zeros(7, dtype=torch.int64)
        with pytest.raises(VerifyLayoutError, match="do not split evenly"):
            h.init_metadata(attn, fb, "capture")


BAD_BATCHES = bad_batches("trtllm_mha TARGET_VERIFY eager", requests=3)


@pytest.mark.parametrize("case", BAD_BATCHES)
def test_bad_eager_batch_is_refused(monkeypatch, sbd, case):
    """A non-uniform batch, or one above the plugin's maximum width, raises on
    every release; unpatched, the release lays it out without a word."""
    tokens, message = BAD_BATCHES[case]
    algorithm = sbd(2)  # the loader has applied every patch
    with h.backend(monkeypatch, NDT, 16, MAX_BS) as attn:
        fb = h.forward_batch(h.make_batch(attn, [5, 17, 3], 2, torch.Generator().manual_seed(0)), attn)
        fb.spec_algorithm, fb.input_ids = algorithm, torch.zeros(tokens, dtype=torch.int64)
        refused_by_the_patches_only(lambda: h.init_metadata(attn, fb, "eager"), message)


def _kit_publishes_ndt(monkeypatch, ndt):
    """The kit publishes ndt = the case's width; make it publish ``ndt`` instead,
    as a server whose plugin verifies fewer tokens than ndt would. Returns the
    list of ndt values published."""
    import importlib

    published = []

    kit = importlib.import_module("sglang.test.kits.attention_unittest.attention_methods.dense_attention")

    def publishing(original):
        def publish(*args, **kwargs):
            if kwargs.get("speculative_num_draft_tokens"):
                kwargs.update(speculative_num_draft_tokens=ndt, speculative_num_steps=ndt - 1)
                published.append(ndt)
            return original(*args, **kwargs)

        return publish

    if hasattr(kit, "make_mock_server_args"):  # up to 0.5.14
        monkeypatch.setattr(kit, "make_mock_server_args", publishing(kit.make_mock_server_args))
    else:  # 0.5.16+: a runtime-context override
        context = type(kit.get_context())
        monkeypatch.setattr(context, "override_server_args", publishing(context.override_server_args))
    return published


@pytest.mark.parametrize("width,ndt", [(3, 3), (2, NDT)], ids=["width=ndt", "width<ndt"])
def test_sglang_kit_spec_verify_case_through_the_patched_backend(monkeypatch, patched, width, ndt):
    """SGLang's own attention kit (0.5.13+): its EAGLE verify case, real forward
    (decode kernel: the harness's torch stand-in) against its dense reference;
    as the kit has it (width = ndt) and at a plugin's width below ndt."""
    import importlib.util
    import unittest

    if importlib.util.find_spec("sglang.test.kits.attention_unittest") is None:
        pytest.skip(f"SGLang {RELEASE} ships no attention_unittest kit")
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    # up to 0.5.19 the kit imports every backend, the dual-chunk one imports sgl_kernel (CUDA only) at its top
    absent_kernel_package(monkeypatch, "sgl_kernel", "sparse_flash_attn")
    from sglang.test.kits.attention_unittest.attention_methods.dense_attention import DenseAttentionCase
    from sglang.test.kits.attention_unittest.runner_modes.speculative_target_verify_runner import (
        run_dense_spec_verify_case,
    )

    h.bind_stand_ins(monkeypatch)
    monkeypatch.setenv("SGLANG_FLASHINFER_WORKSPACE_SIZE", str(1 << 20))
    published = _kit_publishes_ndt(monkeypatch, ndt)
    for page_size in (1, 16):
        case = DenseAttentionCase(name=f"verify_p{page_size}", backend="trtllm_mha", forward_mode=ForwardMode.TARGET_VERIFY,
                                  num_heads=4, num_kv_heads=2, page_size=page_size, prefix_lens=(5, 17, 30),
                                  extend_lens=(width,) * 3)
        with h.single_attention_rank(monkeypatch), torch.no_grad():
            run_dense_spec_verify_case(unittest.TestCase(), case, topk=1, spec_kind="eagle", device="cpu",
                                       dtype=torch.float32)
    assert published == [ndt, ndt]  # the backend was built at this ndt, once per page size


def test_ragged_verify_batch_is_left_to_the_release(monkeypatch, patched):
    """0.5.16+: a ragged verify batch (per-request lengths in its layout) is
    not a uniform batch; eager_check lets the release lay it out."""
    import importlib.util
    from types import SimpleNamespace

    if importlib.util.find_spec("sglang.srt.speculative.ragged_verify") is None:
        pytest.skip(f"SGLang {RELEASE} has no ragged verify")
    from sglang.srt.speculative.ragged_verify import RaggedVerifyLayout

    lens = [1, 3, 3]
    with h.backend(monkeypatch, NDT, 16, MAX_BS) as attn:
        fb = h.forward_batch(h.make_batch(attn, [5, 17, 3], 2, torch.Generator().manual_seed(0)), attn)
        layout = RaggedVerifyLayout.from_verify_lens(verify_lens_cpu=lens, device="cpu", grid=[8])
        fb.input_ids, fb.spec_info = torch.zeros(sum(lens), dtype=torch.int64), SimpleNamespace(ragged_verify_layout=layout)
        m = h.init_metadata(attn, fb, "eager")
    assert m.is_ragged_verify and m.cu_seqlens_q.tolist() == [0, 1, 4, 7]


@pytest.mark.parametrize("width", [2, 3, NDT, 6])
@pytest.mark.parametrize("phase", PHASES)
def test_xqa_spec_decode_mask_follows_the_width(monkeypatch, sbd, width, phase):
    """SM90/SM120 (0.5.21+): the real forward hands XQA a causal mask; with the
    patch, attention at any width matches the batch definition; without it,
    a width other than ndt attends wrongly (or reads past the mask)."""
    from sglang_spec_plugins.patches import PATCHES

    if trtllm_mha.XQA_MASK.plan(RELEASE).verdict != "apply":
        pytest.skip(trtllm_mha.XQA_MASK.plan(RELEASE).reason)
    algorithm = sbd(width)  # the loader has applied every patch

    def attention():
        with h.backend(monkeypatch, NDT, 16, MAX_BS, sm90=True) as attn:
            gen = torch.Generator().manual_seed(width)
            for step in ("capture", "replay") if phase == "replay" else (phase,):  # a replay follows its capture
                batch = h.make_batch(attn, [5, 17, 3] if step != "replay" else [9, 30, 2], width, gen)
                fb = h.forward_batch(batch, attn)
                fb.spec_algorithm = algorithm
                h.init_metadata(attn, fb, step)
            try:
                return torch.allclose(h.forward(attn, fb, batch), h.reference_attention(batch, attn), atol=1e-5, rtol=1e-4)
            except IndexError:  # XQA would read past the mask
                return False

    assert attention()
    revert_all(PATCHES)
    assert attention() == (width == NDT)


def test_xqa_spec_decode_mask_of_each_width_on_one_backend(monkeypatch, sglang_loaded):
    """Widths by batch size ask one backend for several widths, one step after another: each step gets the
    mask of its own width (a mask kept for one width and handed to another attends wrongly)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    if trtllm_mha.XQA_MASK.plan(RELEASE).verdict != "apply":
        pytest.skip(trtllm_mha.XQA_MASK.plan(RELEASE).reason)
    sglang_loaded("[plugins]\nenable = ['sbd']\n[algorithms.SBD]\nmax_tokens_per_req = 8\n"
                  "widths_by_batch_size = {1 = 3, 3 = 2}\n")
    algorithm = SpeculativeAlgorithm.from_string("SBD")
    steps = [([5, 17, 3], 2), ([9], 3), ([30, 2, 11], 2), ([4], 3)]
    with h.backend(monkeypatch, NDT, 16, MAX_BS, sm90=True) as attn:
        gen = torch.Generator().manual_seed(0)
        for prefixes, width in steps:
            batch = h.make_batch(attn, prefixes, width, gen)
            fb = h.forward_batch(batch, attn)
            fb.spec_algorithm = algorithm
            h.init_metadata(attn, fb, "eager")
            got = h.forward(attn, fb, batch)
            assert torch.allclose(got, h.reference_attention(batch, attn), atol=1e-5, rtol=1e-4), (prefixes, width)


@pytest.mark.parametrize("sm90", [True, False], ids=["SM90", "SM100"])
def test_xqa_verify_refused_exactly_where_forward_extend_passes_no_mask(monkeypatch, sbd, sm90):
    """The start-up refusal of trtllm_mha on an XQA GPU against the release's
    real forward_extend on that platform: a verify at width ndt hands the
    decode kernel no mask (flashinfer's xqa asserts one for more than one token
    per request) exactly where ``attention_support`` refuses; elsewhere (SM100:
    trtllm-gen) nothing is refused."""
    from sglang.srt.utils import common

    from sglang_spec_plugins.patches.attention_support import attention_support
    from sglang_spec_plugins.patches.support import Serving

    algorithm = sbd(NDT)
    masks = []
    with h.backend(monkeypatch, NDT, 16, MAX_BS, sm90=sm90) as attn:
        decode = h._module(h.TRTLLM).flashinfer.decode
        kernel = decode.trtllm_batch_decode_with_kv_cache
        monkeypatch.setattr(decode, "trtllm_batch_decode_with_kv_cache", lambda *a, **k: masks.append(k.get("mask")) or kernel(*a, **k))
        batch = h.make_batch(attn, [5, 17, 3], NDT, torch.Generator().manual_seed(0))
        fb = h.forward_batch(batch, attn)
        fb.spec_algorithm = algorithm
        h.init_metadata(attn, fb, "eager")
        h.forward(attn, fb, batch)
        assert attn.is_xqa_impl == sm90
    if sm90:
        monkeypatch.setattr(common, "is_sm90_supported", lambda: True)
    refused = [w for w in (1, 2, NDT, 6) if attention_support("trtllm_mha", w, NDT).verdict == Serving.REFUSED]
    assert len(masks) == 1
    if not sm90:  # served here; the reason says what an XQA GPU would meet
        assert masks == [None] and refused == []
        warned = "on an SM90/SM120 GPU refused at start-up" in attention_support("trtllm_mha", NDT, NDT).reason
        assert warned == (not trtllm_mha.verify_passes_xqa_mask())
        return
    masked = masks[0] is not None
    assert trtllm_mha.verify_passes_xqa_mask() == masked
    assert refused == ([] if masked else [2, NDT, 6])  # one token per request needs no mask
    if not masked:
        assert "SM90 (Hopper)" in attention_support("trtllm_mha", NDT, NDT).reason
