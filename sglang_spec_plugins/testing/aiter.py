"""The real AiterAttnBackend (sglang/srt/layers/attention/aiter_backend.py) on a CPU, aiter absent.

``Harness(monkeypatch, ...)`` builds the backend from a minimal model runner,
publishes the configuration the installed release reads, lays out a
TARGET_VERIFY batch (random prefixes, paged KV cache) and drives the release's
own metadata functions (eager, graph capture, graph replay) and its own
``forward_extend``. The only stand-ins, bound with ``monkeypatch.setattr(...,
raising=False)`` on the aiter_backend module, are names SGLang leaves unbound
without aiter:

* ``unified_attention``: aiter's varlen paged attention kernel, replaced by
  :func:`paged_attention`, a torch reference of its documented contract;
* ``reset_verify_attn_plan_cache`` (0.5.20+): clears the gfx950 verify kernel's plan cache; a no-op;
* ``asm_verify_attn_enabled`` (0.5.20+): whether that gfx950 kernel is on; False;
* ``mla_decode_fwd``, ``mla_prefill_fwd``, ``unified_attention_3d_mtp*_func``: kernels these tests
  must never reach (MLA is only built; the 3-D MTP kernel needs gfx950, bf16, head_dim 256); they fail if called.

Triton kernels SGLang itself ships (page-table and kv-index builders) run for
real under ``TRITON_INTERPRET=1``, which must be set before triton is imported.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import types

assert "triton" not in sys.modules or os.environ.get("TRITON_INTERPRET") == "1", "import sglang_spec_plugins.testing.aiter before triton"
os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

from .attention_reference import attend  # noqa: E402

MODULE = "sglang.srt.layers.attention.aiter_backend"
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 16
CONTEXT_LEN = 256


def paged_attention(*, q, k, v, out, cu_seqlens_q, seqused_k, max_seqlen_q, block_table, softmax_scale, causal, **_):
    """aiter ``unified_attention`` in torch: request i's queries are
    ``q[cu[i]:cu[i+1]]``, its keys the first ``seqused_k[i]`` slots of its
    ``block_table`` row, query j sees keys up to ``seqused_k[i] - len_q + j``
    (bottom-right causal). Like the kernel, it computes at most
    ``max_seqlen_q`` queries per request and leaves other rows of ``out`` untouched."""
    assert causal
    page = k.shape[1]
    kf, vf = k.reshape(-1, *k.shape[2:]), v.reshape(-1, *v.shape[2:])
    for i in range(len(cu_seqlens_q) - 1):
        start, stop, n_k = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1]), int(seqused_k[i])
        end = min(stop, start + int(max_seqlen_q))
        pos = torch.arange(n_k)
        slots = block_table[i, pos // page].long() * page + pos % page
        out[start:end] = attend(q[start:end], kf[slots], vf[slots], n_k - (stop - start), softmax_scale)


def _must_not_run(*args, **kwargs):
    raise AssertionError("an AITER MLA kernel was reached")


class Batch:
    """A TARGET_VERIFY batch from its definition: ``prefix`` lengths, one ``width``,
    a paged KV cache holding each request's prefix and new tokens, and queries."""

    def __init__(self, harness, prefix, width, gen):
        self.prefix, self.width, self.bs = list(prefix), width, len(prefix)
        h = harness
        n = self.bs * width
        self.q = torch.randn(n, HEADS, HEAD_DIM, generator=gen)
        self.k_new = torch.randn(n, KV_HEADS, HEAD_DIM, generator=gen)
        self.v_new = torch.randn(n, KV_HEADS, HEAD_DIM, generator=gen)
        self.req_pool_indices = torch.randperm(h.max_reqs, generator=gen)[: self.bs]
        pages = torch.randperm(h.num_pages - 1, generator=gen) + 1  # page 0 stays unused
        h.req_to_token.zero_()
        per_req = CONTEXT_LEN // h.page_size
        self.out_cache_loc = []
        for i, (r, p) in enumerate(zip(self.req_pool_indices.tolist(), self.prefix)):
            pos = torch.arange(p + width)
            own = pages[i * per_req : (i + 1) * per_req]
            slots = own[pos // h.page_size] * h.page_size + pos % h.page_size
            h.req_to_token[r, : p + width] = slots.int()
            new = slots[p:]
            h.k_cache[new] = self.k_new[i * width : (i + 1) * width]
            h.v_cache[new] = self.v_new[i * width : (i + 1) * width]
            self.out_cache_loc.append(new)
        self.out_cache_loc = torch.cat(self.out_cache_loc)
        self.seq_lens = torch.tensor(self.prefix, dtype=torch.int32)

    def expected(self, harness):
        """Attention computed from the definition: each request's keys are its
        prefix then its ``width`` new tokens, causal within the new tokens."""
        out = []
        for i, r in enumerate(self.req_pool_indices.tolist()):
            slots = harness.req_to_token[r, : self.prefix[i] + self.width].long()
            q = self.q[i * self.width : (i + 1) * self.width]
            out.append(attend(q, harness.k_cache[slots], harness.v_cache[slots], self.prefix[i], harness.scale))
        return torch.cat(out)

    def forward_batch(self, harness, seq_lens=None):
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        seq_lens = self.seq_lens if seq_lens is None else seq_lens
        return types.SimpleNamespace(
            forward_mode=ForwardMode.TARGET_VERIFY,
            batch_size=self.bs,
            input_ids=torch.zeros(self.bs * self.width, dtype=torch.int64),
            req_pool_indices=self.req_pool_indices,
            seq_lens=seq_lens,
            seq_lens_cpu=seq_lens.cpu(),
            seq_lens_sum=int(seq_lens.sum()),
            out_cache_loc=self.out_cache_loc,
            encoder_lens=None, attn_attend_prefix_cache=False,
            token_to_kv_pool=harness.runner.token_to_kv_pool, req_to_token_pool=harness.runner.req_to_token_pool,
            # what a drafter reusing EAGLE's verify input at the configured ndt carries
            spec_info=types.SimpleNamespace(draft_token_num=harness.ndt, custom_mask=None, topk=1, positions=None),
            spec_algorithm=harness.runner.spec_algorithm,
        )


class Harness:
    """One real AiterAttnBackend (non-MLA: the unified verify path, or with
    ``unified=False`` the default path through SGLang's Triton
    ``extend_attention_fwd`` and a custom mask; or MLA) with its runner."""

    def __init__(self, monkeypatch, *, ndt, page_size=1, mla=False, spec_algorithm=None, max_reqs=8, unified=True):
        self.mod = importlib.import_module(MODULE)
        stand_ins = dict(unified_attention=paged_attention, reset_verify_attn_plan_cache=lambda: None,
                         asm_verify_attn_enabled=lambda: False)
        for name in ("mla_decode_fwd", "mla_prefill_fwd", "unified_attention_3d_mtp_func",
                     "unified_attention_3d_mtp_decode_func", "unified_attention_3d_mtp_ragged_func"):
            stand_ins[name] = _must_not_run
        for name, stand_in in stand_ins.items():
            monkeypatch.setattr(self.mod, name, stand_in, raising=False)
        # the unified verify path (aiter's unified_attention over a page table), or the default
        # path (SGLang's Triton extend_attention_fwd, interpreted, with the metadata's custom mask)
        monkeypatch.setenv("SGLANG_USE_AITER_UNIFIED_ATTN", "1" if unified else "0")
        monkeypatch.setenv("SGLANG_AITER_UNIFIED_VERIFY", "1")
        self.ndt, self.page_size, self.max_reqs = ndt, page_size, max_reqs
        self.num_pages = max_reqs * CONTEXT_LEN // page_size + 1
        slots = self.num_pages * page_size
        self.k_cache = torch.zeros(slots, KV_HEADS, HEAD_DIM)
        self.v_cache = torch.zeros(slots, KV_HEADS, HEAD_DIM)
        self.req_to_token = torch.zeros(max_reqs, CONTEXT_LEN, dtype=torch.int32)
        self.scale = HEAD_DIM ** -0.5
        self.runner = self._model_runner(mla, spec_algorithm)
        self._config = contextlib.ExitStack()
        _publish_config(self._config, monkeypatch, ndt, page_size)

    def close(self):
        self._config.close()

    def _model_runner(self, mla, spec_algorithm):
        from sglang.srt.configs.model_config import AttentionArch

        model_config = types.SimpleNamespace(
            dtype=torch.float32, is_multimodal=False, num_attention_heads=16 if mla else HEADS,
            head_dim=HEAD_DIM, get_num_kv_heads=lambda tp: 1 if mla else KV_HEADS,
            attention_arch=AttentionArch.MLA if mla else AttentionArch.MHA, context_len=CONTEXT_LEN,
            v_head_dim=HEAD_DIM, kv_lora_rank=HEAD_DIM, qk_rope_head_dim=HEAD_DIM, qk_nope_head_dim=HEAD_DIM,
            is_hybrid_swa=False, is_encoder_decoder=False,
        )
        server_args = types.SimpleNamespace(
            page_size=self.page_size, speculative_num_draft_tokens=self.ndt, speculative_num_steps=self.ndt - 1,
            speculative_eagle_topk=1, kv_cache_dtype="auto", enable_dp_attention=False,
        )
        pool = types.SimpleNamespace(
            get_kv_buffer=lambda layer_id: (self.k_cache, self.v_cache),
            get_value_buffer=lambda layer_id: self.v_cache,
            get_key_buffer=lambda layer_id: self.k_cache,
        )
        return types.SimpleNamespace(
            model_config=model_config, server_args=server_args, device="cpu", kv_cache_dtype=torch.float32,
            req_to_token_pool=types.SimpleNamespace(req_to_token=self.req_to_token, size=self.max_reqs),
            token_to_kv_pool=pool, token_to_kv_pool_allocator=types.SimpleNamespace(get_kvcache=lambda: pool),
            spec_algorithm=spec_algorithm, is_draft_worker=False,
            decode_attention_backend_str="aiter", page_size=self.page_size, kv_index_translator=None,
            dtype=torch.float32, sliding_window_size=None, attention_chunk_size=None,
        )

    def backend(self):
        return self.mod.AiterAttnBackend(self.runner)

    def batch(self, prefix, width, seed=0):
        return Batch(self, prefix, width, torch.Generator().manual_seed(seed))

    # -- the release's own metadata entry points -----------------------------

    def eager(self, backend, fb):
        backend.init_forward_metadata(fb)

    def init_graphs(self, backend, max_bs):
        # a token-level kv_indices buffer: 0.5.12.x sizes its own per page, too small at page_size 16
        # for the token-level indices its TARGET_VERIFY graph path writes (an upstream overflow, any width)
        backend.init_cuda_graph_state(max_bs, max_bs * CONTEXT_LEN,
                                      kv_indices_buf=torch.zeros(max_bs * CONTEXT_LEN, dtype=torch.int32))

    def capture(self, backend, fb):
        if hasattr(backend, "init_forward_metadata_out_graph"):  # 0.5.13+
            backend.init_forward_metadata_out_graph(fb, in_capture=True)
        else:
            backend.init_forward_metadata_capture_cuda_graph(
                fb.batch_size, fb.input_ids.shape[0], fb.req_pool_indices, fb.seq_lens, None,
                fb.forward_mode, fb.spec_info)

    def replay(self, backend, fb):
        if hasattr(backend, "init_forward_metadata_out_graph"):
            backend.init_forward_metadata_out_graph(fb)
        else:
            backend.init_forward_metadata_replay_cuda_graph(
                fb.batch_size, fb.req_pool_indices, fb.seq_lens, fb.seq_lens_sum, None,
                fb.forward_mode, fb.spec_info, seq_lens_cpu=fb.seq_lens_cpu)

    def run(self, mode, batch, max_bs, capture_spec_info=None):
        """``(attention, metadata)`` of ``batch`` through the backend's ``mode``
        metadata path ("eager", "capture", or "replay": capture on dummy
        seq_lens in a static buffer, replay the batch's into it, then run what
        the graph recorded: the capture-time metadata and forward batch).
        ``capture_spec_info``: the verify input the graph is captured with
        (default: the batch's own), as the graph runner's ``get_spec_info``
        builds it; replay always gets the batch's own."""
        backend = self.backend()
        if mode == "eager":
            fb = batch.forward_batch(self)
            self.eager(backend, fb)
            return self.attend(backend, batch, fb), backend.forward_metadata
        self.init_graphs(backend, max_bs)
        if mode == "capture":
            fb = batch.forward_batch(self)
            self.capture(backend, fb)
            return self.attend(backend, batch, fb), backend.forward_metadata
        static = torch.full((batch.bs,), backend.get_cuda_graph_seq_len_fill_value(), dtype=torch.int32)
        fb = batch.forward_batch(self, seq_lens=static)
        own, fb.spec_info = fb.spec_info, capture_spec_info or fb.spec_info
        self.capture(backend, fb)
        fb.spec_info = own
        captured = backend.forward_metadata
        static.copy_(batch.seq_lens)
        fb.seq_lens_cpu, fb.seq_lens_sum = static.clone(), int(static.sum())
        self.replay(backend, fb)
        backend.forward_metadata = captured
        return self.attend(backend, batch, fb), captured

    def attend(self, backend, batch, fb):
        """The release's forward_extend on the batch (its K/V already in the cache)."""
        layer = types.SimpleNamespace(
            layer_id=0, tp_q_head_num=HEADS, tp_k_head_num=KV_HEADS, tp_v_head_num=KV_HEADS,
            qk_head_dim=HEAD_DIM, v_head_dim=HEAD_DIM, head_dim=HEAD_DIM, scaling=self.scale, logit_cap=0.0,
            sliding_window_size=None, is_cross_attention=False, k_scale=None, v_scale=None,
        )
        n = batch.q.shape[0]
        # q flat, k and v per head, as RadixAttention hands them to the backend
        out = backend.forward_extend(batch.q.reshape(n, -1), batch.k_new, batch.v_new, layer, fb, save_kv_cache=False)
        return out.view(n, HEADS, HEAD_DIM)


def _publish_config(stack, monkeypatch, ndt, page_size):
    """Publish the parallel and server configuration the installed release reads."""
    rc = importlib.import_module("sglang.srt.runtime_context") if importlib.util.find_spec("sglang.srt.runtime_context") else None
    if rc is not None and hasattr(rc, "get_parallel"):  # 0.5.14+
        stack.enter_context(rc.get_parallel().override(attn_tp_size=1))
    else:  # 0.5.12-0.5.13: get_attention_tp_size() reads the attention TP group
        ps = importlib.import_module("sglang.srt.distributed.parallel_state")
        monkeypatch.setattr(ps, "_ATTN_TP", types.SimpleNamespace(world_size=1, rank_in_group=0))
    if rc is not None and hasattr(rc, "get_context") and hasattr(rc.get_context(), "override_server_args"):
        stack.enter_context(rc.get_context().override_server_args(
            speculative_num_draft_tokens=ndt, speculative_num_steps=ndt - 1, speculative_eagle_topk=1,
            page_size=page_size))
