"""The real TRTLLMHAAttnBackend on CPU (see shared/cpu-harness.md), and
TARGET_VERIFY batches for it.

The model runner is a SimpleNamespace carrying SGLang's own req-to-token and
KV pools; the only stand-ins are names SGLang leaves unbound without CUDA,
bound with ``monkeypatch.setattr(..., raising=False)``: flashinfer's wrapper
classes, and a ``flashinfer`` namespace whose utils size nothing and whose one
decode kernel (the only one a uniform TARGET_VERIFY forward reaches) is a
torch reference. Configuration is
published the way each release's own tests do: a runtime-context override
where the release has one (0.5.16+), ``server_args`` on the model runner
before. The backend's Triton kernels run under TRITON_INTERPRET=1, which the
test module sets before triton is first imported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import weakref
from types import SimpleNamespace
from typing import List, Optional

import torch

from .attention_reference import attend

TRTLLM = "sglang.srt.layers.attention.trtllm_mha_backend"
NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 4, 2, 16
CONTEXT_LEN = 256


def _module(name):
    return importlib.import_module(name)


def bind_stand_ins(monkeypatch) -> None:
    """Names SGLang imports only under CUDA (see the module doc)."""
    flashinfer_backend = _module("sglang.srt.layers.attention.flashinfer_backend")
    for name in ("BatchPrefillWithRaggedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper",
                 "BatchDecodeWithPagedKVCacheWrapper"):
        monkeypatch.setattr(flashinfer_backend, name, lambda *a, **k: SimpleNamespace(), raising=False)
    utils = SimpleNamespace(get_device_sm_count=lambda *a, **k: 1,
                            get_trtllm_gen_multi_ctas_kv_counter_bytes=lambda *a, **k: 0)
    flashinfer = SimpleNamespace(utils=utils, decode=SimpleNamespace(trtllm_batch_decode_with_kv_cache=_decode_kernel))
    for module in (TRTLLM, "sglang.srt.layers.attention.trtllm_mla_backend"):
        if not hasattr(_module(module), "flashinfer"):  # bound only under CUDA
            monkeypatch.setattr(_module(module), "flashinfer", flashinfer, raising=False)


def _decode_kernel(query, kv_cache, workspace_buffer, block_tables, seq_lens, max_seq_len, bmm1_scale, bmm2_scale,
                   q_len_per_req=1, out=None, out_dtype=None, mask=None, **_):
    """A torch stand-in for flashinfer's trtllm_batch_decode_with_kv_cache on
    the uniform TARGET_VERIFY path: ``q_len_per_req`` queries per request,
    keys through the page table (HND pages), causal within the block; or,
    given a ``mask`` (the XQA kernel on SM90/SM120), masked within the block
    as XQA reads it: request i's rows are the ``q_len_per_req`` rows at row
    ``i * q_len_per_req`` of the mask's memory (flashinfer csrc/xqa/mha.cu
    shifts the mask pointer by ``reqSeqOffset * words``), bit c of row t
    letting query t see new token c."""
    k_pages, v_pages = kv_cache
    page = k_pages.shape[2]
    result = torch.empty(query.shape, dtype=torch.float32)
    for i, kv_len in enumerate(seq_lens.tolist()):
        pos = torch.arange(kv_len)
        pages = block_tables[i, pos // page].long()
        rows = slice(i * q_len_per_req, (i + 1) * q_len_per_req)
        k, v = k_pages[pages, :, pos % page].float(), v_pages[pages, :, pos % page].float()
        block = None if mask is None else _xqa_block(mask, i, q_len_per_req)
        result[rows] = attend(query[rows].float(), k, v, kv_len - q_len_per_req, bmm1_scale, block) * bmm2_scale
    result = result.to(out_dtype or query.dtype)
    return result if out is None else out.copy_(result)


@contextlib.contextmanager
def single_attention_rank(monkeypatch):
    """One attention rank, set the way the release's own attention tests set it."""
    rc = _module("sglang.srt.runtime_context") if importlib.util.find_spec("sglang.srt.runtime_context") else None
    if rc is None:  # <= 0.5.13: their kit forces a single attention-TP rank
        for name in ("sglang.srt.layers.attention.flashinfer_backend", "sglang.srt.layers.attention.triton_backend", TRTLLM):
            monkeypatch.setattr(_module(name), "get_attention_tp_size", lambda: 1, raising=False)
        yield
        return
    known = getattr(rc, "_PARALLEL_FIELDS", None) or rc._parallel_fields()  # 0.5.14 / later
    ranks = dict(attn_tp_size=1, attn_tp_rank=0, attn_cp_size=1, attn_cp_rank=0, attn_dcp_size=1, attn_dcp_rank=0)
    with rc.get_parallel().override(**{k: v for k, v in ranks.items() if k in known}):
        yield


@contextlib.contextmanager
def _published(monkeypatch, ndt: int, bs: int, name: str = "trtllm_mha"):
    """Publish server args (attention backend ``name``) and a single attention
    rank as the release's own attention tests do; yields the server args the
    model runner carries."""
    fields = dict(attention_backend=name, speculative_num_draft_tokens=ndt, speculative_eagle_topk=1,
                  speculative_num_steps=max(1, ndt - 1), max_running_requests=bs)
    rc = _module("sglang.srt.runtime_context") if importlib.util.find_spec("sglang.srt.runtime_context") else None
    with single_attention_rank(monkeypatch):
        if rc is not None and hasattr(rc.get_context(), "override_server_args"):  # 0.5.16+
            override = rc.get_context().override_server_args(**fields)
            try:
                yield override.install()
            finally:
                override.restore()
        else:  # a real ServerArgs with its defaults, __post_init__ skipped (their make_mock_server_args)
            from sglang.srt.server_args import ServerArgs

            args = object.__new__(ServerArgs)
            for f in dataclasses.fields(ServerArgs):
                if f.default is not dataclasses.MISSING:
                    setattr(args, f.name, f.default)
                elif f.default_factory is not dataclasses.MISSING:
                    setattr(args, f.name, f.default_factory())
            for name, value in fields.items():
                setattr(args, name, value)
            yield args


_RUNNERS = weakref.WeakKeyDictionary()  # backend -> its model runner (0.5.12 keeps no pool on the backend)


class _Config(SimpleNamespace):
    def get_num_kv_heads(self, tp_size, dcp_size=1):
        return NUM_KV_HEADS

    def get_num_attention_heads(self, tp_size):
        return NUM_HEADS

    def get_max_num_attention_heads(self):
        return NUM_HEADS


def _model_runner(server_args, page_size: int, max_bs: int, name: str = "trtllm_mha"):
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    def accepts(cls, **kw):  # the pools' keyword arguments vary across releases
        params = inspect.signature(cls).parameters
        return cls(**{k: v for k, v in kw.items() if k in params})

    req_to_token_pool = accepts(ReqToTokenPool, size=max_bs, max_context_len=CONTEXT_LEN, device="cpu",
                                enable_memory_saver=False)
    kv_pool = accepts(MHATokenToKVPool, size=max_bs * CONTEXT_LEN + page_size, page_size=page_size, dtype=torch.float32,
                      head_num=NUM_KV_HEADS, head_dim=HEAD_DIM, layer_num=1, device="cpu", enable_memory_saver=False,
                      enable_alt_stream=False)
    config = _Config(context_len=CONTEXT_LEN, hidden_size=NUM_HEADS * HEAD_DIM, num_attention_heads=NUM_HEADS,
                     num_key_value_heads=NUM_KV_HEADS, head_dim=HEAD_DIM, v_head_dim=HEAD_DIM, is_multimodal=False,
                     is_encoder_decoder=False, hf_config=SimpleNamespace(architectures=["LlamaForCausalLM"]),
                     attention_arch=None, is_hybrid_swa=False)
    runner = SimpleNamespace(
        server_args=server_args, model_config=config, device="cpu", dtype=torch.float32, kv_cache_dtype=torch.float32,
        kv_cache_dtype_str="auto", page_size=page_size, req_to_token_pool=req_to_token_pool, token_to_kv_pool=kv_pool,
        token_to_kv_pool_allocator=SimpleNamespace(page_size=page_size, get_kvcache=lambda: kv_pool),
        prefill_attention_backend_str=name, decode_attention_backend_str=name,
        sliding_window_size=None, is_hybrid_swa=False, is_draft_worker=False, max_running_requests=max_bs,
        model=torch.nn.Module(), use_mla_backend=False, attention_chunk_size=None, gpu_id=0,
    )
    model_runner = _module("sglang.srt.model_executor.model_runner").ModelRunner
    if hasattr(model_runner, "init_kv_index_translator"):  # where backends read KV ids through one
        model_runner.init_kv_index_translator(runner)
    return runner


@dataclasses.dataclass
class Batch:
    """A uniform TARGET_VERIFY batch: request i has ``prefixes[i]`` cached tokens
    then ``width`` new ones, at shuffled KV slots; keys/values per slot."""

    prefixes: List[int]
    width: int
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor  # the prefixes (SGLang's seq_lens in TARGET_VERIFY)
    q: torch.Tensor  # [bs*width, heads, dim]


def make_batch(backend, prefixes, width, gen) -> Batch:
    """Write a batch into the backend's pools: slots per page of ``page_size``."""
    page = _RUNNERS[backend].page_size
    bs = len(prefixes)
    req_to_token = req_to_token_of(backend)
    free_pages = torch.randperm(req_to_token.shape[1] * bs // page - 1, generator=gen) + 1  # page 0 is the sink
    used = 0
    for i, prefix in enumerate(prefixes):
        n_pages = -(-(prefix + width) // page)
        pages = free_pages[used:used + n_pages]
        used += n_pages
        slots = (pages[:, None] * page + torch.arange(page)).flatten()[: prefix + width]
        req_to_token[i, : prefix + width] = slots.to(req_to_token.dtype)
    k, v = kv_buffers(backend)
    k.copy_(torch.randn(k.shape, generator=gen))
    v.copy_(torch.randn(v.shape, generator=gen))
    q = torch.randn(bs * width, NUM_HEADS, HEAD_DIM, generator=gen)
    return Batch(list(prefixes), width, torch.arange(bs), torch.tensor(prefixes, dtype=torch.int64), q)


class _ForwardBatch(SimpleNamespace):
    """A SimpleNamespace SGLang can hold a weak reference to (0.5.19+ memoises per batch)."""


def forward_batch(batch: Batch, backend):
    """The TARGET_VERIFY ForwardBatch the runner hands the backend (only the
    fields its metadata functions read)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    bs, width = len(batch.prefixes), batch.width
    n = bs * width
    plan = None
    if importlib.util.find_spec("sglang.srt.mem_cache.kv_loc_plan"):  # 0.5.22+: pages are read through a plan
        from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan

        plan = KVLocPlan(source=backend.kv_index_translator, req_pool_indices=batch.req_pool_indices,
                         seq_lens=batch.seq_lens, seq_lens_cpu=batch.seq_lens, write_virtual=None, read_extent=width)
    return _ForwardBatch(
        forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, input_ids=torch.zeros(n, dtype=torch.int64),
        positions=torch.zeros(n, dtype=torch.int64), seq_lens=batch.seq_lens.clone(),
        seq_lens_cpu=batch.seq_lens.clone(), seq_lens_sum=int(batch.seq_lens.sum()),
        req_pool_indices=batch.req_pool_indices, req_to_token_pool=_RUNNERS[backend].req_to_token_pool,
        token_to_kv_pool=_RUNNERS[backend].token_to_kv_pool,
        encoder_lens=None, out_cache_loc=None, spec_info=None, kv_loc_plan=plan, extend_seq_lens_cpu=None,
        extend_prefix_lens_cpu=None, attn_cp_metadata=None, spec_algorithm=None, mha_one_shot=False,
    )


def req_to_token_of(attn):
    """The request-to-KV-slot table of the backend's model runner."""
    return _RUNNERS[attn].req_to_token_pool.req_to_token


def kv_buffers(attn):
    """The (keys, values) buffers of the backend's one layer: ``[slots, kv_heads, head_dim]``."""
    return _RUNNERS[attn].token_to_kv_pool.get_kv_buffer(0)


@contextlib.contextmanager
def backend(monkeypatch, ndt: int, page_size: int, max_bs: int, sm90: bool = False, graph_width: Optional[int] = None):
    """A TRTLLMHAAttnBackend with ``speculative_num_draft_tokens=ndt`` and its
    CUDA-graph state for ``max_bs`` requests of up to ``graph_width`` tokens
    (default ``ndt``; a plugin's maximum width may exceed it).
    ``sm90``: the platform reports a Hopper GPU (the backend takes its XQA
    path; 0.5.21+ builds the spec-decode mask), as SGLang's platform probe
    would there; the decode stand-in then reads the mask like XQA."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    monkeypatch.setenv("SGLANG_FLASHINFER_WORKSPACE_SIZE", str(1 << 20))  # the default allocates 512 MiB
    bind_stand_ins(monkeypatch)
    if sm90:  # what __init__ sets is_xqa_impl from: get_platform() from 0.5.19, is_sm90_supported() before
        module = _module(TRTLLM)
        if hasattr(module, "get_platform"):
            monkeypatch.setattr(module, "get_platform", lambda: SimpleNamespace(is_sm90=True, is_sm120=False))
        if hasattr(module, "is_sm90_supported"):
            monkeypatch.setattr(module, "is_sm90_supported", lambda: True)
    with _published(monkeypatch, ndt, max_bs) as server_args:
        runner = _model_runner(server_args, page_size, max_bs)
        runner.spec_algorithm = SpeculativeAlgorithm.EAGLE
        attn = _module(TRTLLM).TRTLLMHAAttnBackend(runner)
        attn.init_cuda_graph_state(max_bs, max_bs * (graph_width or ndt))
        _RUNNERS[attn] = runner
        yield attn


def legacy() -> bool:
    """Up to 0.5.12.post1: capture, replay and eager hard-code ndt, and a
    capture's page table is filled only by the replay that precedes every real forward."""
    return hasattr(_module(TRTLLM).TRTLLMHAAttnBackend, "init_forward_metadata_capture_cuda_graph")


def init_metadata(attn, fb, phase: str):
    """Run the backend's own metadata functions for ``phase`` ("eager",
    "capture" or "replay", the latter after a capture at the same batch size)
    as the runner calls them on this release; return ``forward_metadata``."""
    if phase == "eager":
        attn.init_forward_metadata(fb)
    elif hasattr(attn, "init_forward_metadata_capture_cuda_graph"):  # up to 0.5.12.post1
        if phase == "capture":
            attn.init_forward_metadata_capture_cuda_graph(fb.batch_size, fb.positions.numel(), fb.req_pool_indices,
                                                          fb.seq_lens, None, fb.forward_mode, fb.spec_info)
        else:
            attn.init_forward_metadata_replay_cuda_graph(fb.batch_size, fb.req_pool_indices, fb.seq_lens,
                                                         fb.seq_lens_sum, None, fb.forward_mode, fb.spec_info,
                                                         fb.seq_lens_cpu)
    else:  # 0.5.13+: out of graph, then (0.5.15+) the part recorded in the graph
        attn.init_forward_metadata_out_graph(fb, in_capture=phase == "capture")
        if hasattr(attn, "init_forward_metadata_in_graph"):
            attn.init_forward_metadata_in_graph(fb)
    return attn.forward_metadata


def forward(attn, fb, batch: Batch) -> torch.Tensor:
    """The backend's own TARGET_VERIFY ``forward_extend`` for ``batch`` (after
    its metadata), through a real RadixAttention layer; KV already in the pool."""
    from sglang.srt.layers.radix_attention import RadixAttention

    layer = RadixAttention(NUM_HEADS, HEAD_DIM, HEAD_DIM**-0.5, NUM_KV_HEADS, layer_id=0)
    n = batch.q.shape[0]
    unused_kv = torch.zeros(n, NUM_KV_HEADS, HEAD_DIM)
    out = attn.forward_extend(batch.q.reshape(n, -1), unused_kv, unused_kv, layer, fb, save_kv_cache=False)
    return out.reshape(batch.q.shape)


def paged_attention(m, q, k_cache, v_cache, page_size: int) -> torch.Tensor:
    """Attention as the TARGET_VERIFY metadata ``m`` describes it: request i's
    queries are rows ``cu_seqlens_q[i]:cu_seqlens_q[i+1]`` (their count must be
    ``max_seq_len_q``, the kernel's ``q_len_per_req``), its keys the first
    ``cache_seqlens[i]`` slots of page-table row i, causal within the block."""
    out = torch.empty_like(q)
    cu, lens = m.cu_seqlens_q.tolist(), m.cache_seqlens_int32.tolist()
    for i, kv_len in enumerate(lens):
        rows = slice(cu[i], cu[i + 1])
        q_len = cu[i + 1] - cu[i]
        assert q_len == m.max_seq_len_q, f"request {i}: cu_seqlens_q gives {q_len} rows, q_len_per_req is {m.max_seq_len_q}"
        pos = torch.arange(kv_len)
        slots = m.page_table[i, pos // page_size].long() * page_size + pos % page_size
        out[rows] = attend(q[rows], k_cache[slots], v_cache[slots], kv_len - q_len, HEAD_DIM**-0.5)
    return out


def reference_attention(batch: Batch, attn) -> torch.Tensor:
    """Attention straight from the batch definition: request i's query t sees
    its prefix and new tokens 0..t, at the slots ``make_batch`` wrote."""
    k_cache, v_cache = kv_buffers(attn)
    out = torch.empty_like(batch.q)
    for i, prefix in enumerate(batch.prefixes):
        rows = slice(i * batch.width, (i + 1) * batch.width)
        slots = req_to_token_of(attn)[i, : prefix + batch.width].long()
        out[rows] = attend(batch.q[rows], k_cache[slots], v_cache[slots], prefix, HEAD_DIM**-0.5)
    return out


def _xqa_block(mask, request: int, q_len: int) -> torch.Tensor:
    """``[q_len, q_len]`` bool: which new tokens each query of ``request`` may see, read like XQA."""
    words = mask.shape[-1]
    flat = mask.reshape(-1, words).to(torch.int32)
    rows = flat[request * q_len:(request + 1) * q_len]
    if rows.shape[0] < q_len:
        raise IndexError(f"XQA would read mask rows past the mask for request {request} ({q_len} rows per request)")
    col = torch.arange(q_len)
    return (rows[:, col // 16] >> (col % 16)[None, :]) & 1 == 1
