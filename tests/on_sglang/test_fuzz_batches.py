"""Random TARGET_VERIFY batches through the patched trtllm_mha backend (eager,
the real metadata code): each either lays out at its width or raises the
layout error naming the backend and the plugin algorithm; none is laid out
wrong in silence."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported (see test_trtllm_mha)

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_spec_plugins.testing import trtllm as h
from sglang_spec_plugins.verify_layout import VerifyLayoutError, qo_indptr

NDT, MAX_WIDTH = 4, 8  # the sbd fixture's maximum width is 8


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefixes=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=5), tokens=st.integers(min_value=1, max_value=60))
def test_random_batches_lay_out_or_raise(monkeypatch, sbd, prefixes, tokens):
    algorithm = sbd(2)
    requests = len(prefixes)
    width = max(1, tokens // requests)
    with h.backend(monkeypatch, NDT, 16, 8) as attn:
        fb = h.forward_batch(h.make_batch(attn, prefixes, width, torch.Generator().manual_seed(0)), attn)
        fb.spec_algorithm, fb.input_ids = algorithm, torch.zeros(tokens, dtype=torch.int64)
        if tokens % requests or tokens // requests > MAX_WIDTH:
            try:
                h.init_metadata(attn, fb, "eager")
            except VerifyLayoutError as exc:
                assert "trtllm_mha" in str(exc) and "(algorithm SBD, plugin sbd)" in str(exc), str(exc)
                return
            raise AssertionError(f"{tokens} tokens over {requests} requests (max width {MAX_WIDTH}) was laid out")
        meta = h.init_metadata(attn, fb, "eager")
        assert meta.max_seq_len_q == width
        assert meta.cu_seqlens_q.tolist() == qo_indptr(requests, width)
