"""A TARGET_VERIFY CUDA-graph capture and replay through a real attention
backend on CPU, with the verify input SGLang's own graph runner builds.

The graph runner is the release's own (``runner_drive.graph_runner``: its
``__init__`` run through its speculative block), and its real
``get_spec_info`` builds the captured verify input; the backend is the real
flashinfer, triton or trtllm_mha backend, built on the model runner of
``sglang_spec_plugins.testing.trtllm``. Stand-ins, each for what only CUDA provides:

* flashinfer's paged prefill wrapper (:class:`PagedPrefill`): the CUDA-only
  class SGLang's flashinfer backend plans and runs. It keeps flashinfer's
  rules (read off flashinfer 0.6.18 ``prefill.py``): in CUDA-graph mode
  ``plan`` copies the layout into the buffers given at construction, a
  custom mask needs a ``custom_mask_buf``, and a plan may not hold more query
  rows than the first (the capture's) did; ``run`` uses the custom mask iff
  the wrapper holds a mask buffer, else causal per ``causal``; its batch size
  is fixed by the first plan;
* ``device="cuda"`` in the backends' ``init_cuda_graph_state`` (the CPU is the
  device here), through :class:`CpuForCuda`;
* the graph runner's input buffers: only the custom-mask buffer the runner
  hands to ``get_spec_info`` (``buffers.custom_mask``, all ones as the runner
  allocates it).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import textwrap
import types

import torch
from torch.overrides import TorchFunctionMode

import runner_drive
from sglang_spec_plugins.testing import trtllm as h
from sglang_spec_plugins.testing.attention_reference import attend
from sglang_spec_plugins.engine.probe import probe

BACKENDS = {
    "flashinfer": ("sglang.srt.layers.attention.flashinfer_backend", "FlashInferAttnBackend"),
    "triton": ("sglang.srt.layers.attention.triton_backend", "TritonAttnBackend"),
    "trtllm_mha": (h.TRTLLM, "TRTLLMHAAttnBackend"),
}


class CpuForCuda(TorchFunctionMode):
    """Tensors a backend allocates on ``device="cuda"`` land on the CPU."""

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if str(kwargs.get("device", "")).startswith("cuda"):
            kwargs["device"] = "cpu"
        return func(*args, **kwargs)


class PagedPrefill:
    """flashinfer's ``BatchPrefillWithPagedKVCacheWrapper`` as SGLang's TARGET_VERIFY
    uses it (page size 1, NHD), in torch; see the module doc for its rules.
    SGLang 0.5.23 replaces ``begin_forward`` of captured wrappers by its own
    sync-free ``fast_prefill_plan``, which refreshes the buffers and hands the
    host-known layout to ``_cached_module.plan``: the host layout the kernel
    schedules by, which :meth:`run` checks against the device buffers."""

    def __init__(self, workspace=None, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 paged_kv_indptr_buf=None, paged_kv_indices_buf=None, paged_kv_last_page_len_buf=None,
                 custom_mask_buf=None, mask_indptr_buf=None, backend="auto", **_):
        self.is_cuda_graph_enabled = use_cuda_graph
        self._backend = "fa2" if backend == "auto" else backend
        self._float_workspace_buffer = workspace
        self.device = workspace.device if torch.is_tensor(workspace) else torch.device("cpu")
        self._int_workspace_buffer = self._pin_memory_int_workspace_buffer = None
        self._qo_indptr_buf, self._paged_kv_indptr_buf = qo_indptr_buf, paged_kv_indptr_buf
        self._paged_kv_indices_buf, self._paged_kv_last_page_len_buf = paged_kv_indices_buf, paged_kv_last_page_len_buf
        self._custom_mask_buf, self._mask_indptr_buf = custom_mask_buf, mask_indptr_buf
        self._cached_module, self._max_total_num_rows = None, None
        self._batch_size = None
        self._causal = False

    def begin_forward(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
                      num_kv_heads, head_dim, page_size, *args, custom_mask=None, causal=False, **_):
        assert page_size == 1, "SGLang's flashinfer backend plans page size 1"
        bs = len(qo_indptr) - 1
        mask = None if custom_mask is None else custom_mask.reshape(-1).to(torch.bool)
        if self.is_cuda_graph_enabled:
            if self._batch_size is not None and bs != self._batch_size:
                raise ValueError(f"batch size {bs} differs from the captured batch size {self._batch_size}")
            rows = int(qo_indptr[-1])  # the row count is latched by the first plan (the capture)
            if self._max_total_num_rows is None:
                self._max_total_num_rows = rows
            elif rows > self._max_total_num_rows:
                raise ValueError(f"The total number of rows in qo_indptr {rows} in cuda graph mode cannot exceed the "
                                 f"number of rows set during initialization {self._max_total_num_rows}.")
            self._qo_indptr_buf[: bs + 1].copy_(qo_indptr)
            self._paged_kv_indptr_buf[: bs + 1].copy_(paged_kv_indptr)
            n = int(paged_kv_indptr[-1])
            self._paged_kv_indices_buf[:n].copy_(paged_kv_indices[:n])
            if mask is not None:
                if not torch.is_tensor(self._custom_mask_buf):
                    raise ValueError("custom_mask_buf must be initialized with a torch.Tensor in cuda graph mode "
                                     "if we use custom mask in attention computation.")
                self._custom_mask_buf[: mask.numel()].copy_(mask)
        else:
            self._qo_indptr_buf, self._paged_kv_indptr_buf = qo_indptr.clone(), paged_kv_indptr.clone()
            self._paged_kv_indices_buf = paged_kv_indices.clone()
            self._custom_mask_buf = mask
        self._batch_size, self._causal = bs, causal
        self._cached_module = _PlanModule(self)
        self._planned = (qo_indptr.tolist(), paged_kv_indptr.tolist())

    plan = begin_forward

    def forward(self, q, paged_kv_cache, causal=False, sm_scale=None, **_):
        self._causal = causal
        return self.run(q, paged_kv_cache, sm_scale)

    def run(self, q, paged_kv_cache, sm_scale):
        k_cache, v_cache = paged_kv_cache
        bs = self._batch_size
        qo, kv = self._qo_indptr_buf[: bs + 1].tolist(), self._paged_kv_indptr_buf[: bs + 1].tolist()
        assert (qo, kv) == self._planned, f"device layout {(qo, kv)} differs from the planned host layout {self._planned}"
        out = torch.empty_like(q)
        mask_at = 0
        for i in range(bs):
            rows, q_len, kv_len = slice(qo[i], qo[i + 1]), qo[i + 1] - qo[i], kv[i + 1] - kv[i]
            slots = self._paged_kv_indices_buf[kv[i]:kv[i + 1]].long()
            block = None
            if self._custom_mask_buf is not None:  # MaskMode.CUSTOM: q_len x kv_len per request
                full = self._custom_mask_buf[mask_at:mask_at + q_len * kv_len].reshape(q_len, kv_len).to(torch.bool)
                mask_at += q_len * kv_len
                assert full[:, : kv_len - q_len].all(), "a verify mask hides part of the prefix"
                block = full[:, kv_len - q_len:]
            elif not self._causal:
                block = torch.ones(q_len, q_len, dtype=torch.bool)
            out[rows] = attend(q[rows].float(), k_cache[slots].float(), v_cache[slots].float(), kv_len - q_len,
                               sm_scale, block).to(q.dtype)
        return out


class _PlanModule:
    """The compiled module's ``plan``: records the host layout the kernel will schedule by."""

    def __init__(self, wrapper):
        self.wrapper = wrapper

    def plan(self, float_ws, int_ws, pinned_ws, qo_indptr_host, kv_indptr_host, *args):
        self.wrapper._planned = (qo_indptr_host.tolist(), kv_indptr_host.tolist())
        return None


def bind_stand_ins(monkeypatch) -> None:
    h.bind_stand_ins(monkeypatch)
    flashinfer_backend = importlib.import_module(BACKENDS["flashinfer"][0])
    monkeypatch.setattr(flashinfer_backend, "BatchPrefillWithPagedKVCacheWrapper", PagedPrefill, raising=False)


def build_backend(name: str, server_args, algorithm, max_bs: int, max_width: int):
    """The real backend ``name`` for ``algorithm`` (target worker, page size 1,
    float32) with its CUDA-graph state for ``max_bs`` requests of ``max_width``."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    runner = h._model_runner(server_args, 1, max_bs, name)
    runner.spec_algorithm = algorithm
    hf = runner.model_config.hf_config
    hf.get_text_config = lambda: hf
    runner.model_config.linear_attn_registry_result = None  # triton 0.5.23 asks the hybrid-arch registry
    runner.model_config.swa_head_dim = runner.model_config.swa_v_head_dim = h.HEAD_DIM
    runner.hybrid_gdn_config = runner.kimi_linear_config = runner.linear_attn_model_spec = None  # triton 0.5.14: not hybrid
    for method in ("decode_num_tokens_per_req", "decode_num_tokens_per_bs"):  # triton 0.5.21+ asks the runner
        if hasattr(ModelRunner, method):
            setattr(runner, method, types.MethodType(getattr(ModelRunner, method), runner))
    module, cls = BACKENDS[name]
    attn = getattr(importlib.import_module(module), cls)(runner)
    with CpuForCuda():
        attn.init_cuda_graph_state(max_bs, max_bs * max_width)
    h._RUNNERS[attn] = runner
    return attn


def capture_input(algorithm, server_args, attn, num_tokens: int, max_bs: int):
    """What the release's decode CUDA-graph runner captures TARGET_VERIFY with,
    and the width it captures at: its own ``get_spec_info`` (as the class holds
    it now) on the runner its ``__init__`` built for ``algorithm``."""
    runner = graph_runner_for(algorithm, server_args, attn, max_bs)
    return type(runner).get_spec_info(runner, num_tokens), getattr(runner, "captured_req_width", None) or runner.num_tokens_per_bs


def graph_runner_for(algorithm, server_args, attn, max_bs: int):
    """The release's decode CUDA-graph runner for ``algorithm`` on ``attn``
    (its ``__init__`` run through the speculative block), with what its
    ``get_spec_info`` reads: the custom-mask buffer for ``max_bs`` requests."""
    runner = runner_drive.graph_runner(algorithm, False, server_args)
    mr = runner.model_runner
    mr.attn_backend, mr.dtype = attn, torch.float32
    mr.model_config.hidden_size = h.NUM_HEADS * h.HEAD_DIM
    width = getattr(runner, "captured_req_width", None) or runner.num_tokens_per_bs
    max_tokens, fill = max_bs * width, attn.get_cuda_graph_seq_len_fill_value()
    runner.buffers = types.SimpleNamespace(  # sized as 0.5.23's runner sizes it
        custom_mask=torch.ones((max_bs * fill + max_tokens) * width, dtype=torch.bool))
    if not hasattr(runner, "ragged_verify_mode"):  # set after the speculative block (0.5.16+)
        module = importlib.import_module(type(runner).__module__)
        enabled = getattr(module, "ragged_verify_compact_graphs_enabled", lambda algo: False)
        runner.ragged_verify_mode, runner._captured_ragged_layouts = enabled(algorithm), {}
    return runner


def dummy_run_input(algorithm, server_args, attn, bs: int):
    """(verify input, width) of the release's dummy (warm-up) run of ``bs``
    requests for ``algorithm`` (target worker) on ``attn``: its own
    ``_dummy_run`` (as the class holds it now) run up to the end of the
    statement that builds the verify input. Stand-ins: the model-runner
    fields it reads before (a model config of the harness's sizes) and, from
    0.5.14, the static input buffers its caller hands it (all-ones custom mask)."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    owner, _, dummy_run = runner_drive._located(probe().dummy_run)
    mr = runner_drive.model_runner(algorithm, False, server_args)
    mr.attn_backend, mr.dtype = attn, torch.float32
    mr.model_config.hidden_size, mr.model_config.vocab_size, mr.model_config.dtype = h.NUM_HEADS * h.HEAD_DIM, 64, torch.float32
    this = mr if owner is ModelRunner else types.SimpleNamespace(model_runner=mr)
    kwargs = {}
    if "buffers" in inspect.signature(dummy_run).parameters:  # 0.5.14+: the caller's buffers
        tokens = bs * MAX_DUMMY_WIDTH
        z = lambda *shape: torch.zeros(*shape, dtype=torch.int64)  # noqa: E731
        kwargs["buffers"] = types.SimpleNamespace(
            input_ids=z(tokens), positions=z(tokens), out_cache_loc=z(tokens), mrope_positions=z(3, tokens),
            num_token_non_padded=z(1), req_pool_indices=z(bs), seq_lens=z(bs), seq_lens_cpu=z(bs),
            next_token_logits_buffer=None, encoder_lens=None, pp_proxy_tensors=None,
            global_num_tokens_gpu=z(1), global_num_tokens_for_logprob_gpu=z(1),
            custom_mask=torch.ones(tokens * (tokens + MAX_DUMMY_WIDTH), dtype=torch.bool))
    with runner_drive._single_process(dummy_run):
        local = runner_drive.run_until(dummy_run, _verify_input_built(dummy_run), this, bs, **kwargs)
    return local["spec_info"], local.get("num_tokens_per_req", local.get("num_tokens_per_bs"))


MAX_DUMMY_WIDTH = 8


def _verify_input_built(func) -> int:
    """File line of the end of the statement in ``func`` that assigns its verify input."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "spec_info"
                and isinstance(n.value, ast.Call) and not isinstance(n.value.func, ast.Attribute))
    return node.end_lineno + func.__code__.co_firstlineno - 1


def worker_input(shape: str, width: int, mask):
    """The verify input a plugin worker of ``shape`` sends at run time, built
    the way SGLang's own worker of that shape builds it: DFLASH's for a chain
    (no mask where the backend has a causal path), EAGLE's (with its mask) for a tree."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    if shape == "chain":
        from sglang.srt.speculative.dflash_info import DFlashVerifyInput

        return DFlashVerifyInput(draft_token=None, positions=None, draft_token_num=width, custom_mask=mask,
                                 capture_hidden_mode=CaptureHiddenMode.FULL)
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    return EagleVerifyInput(draft_token=None, custom_mask=mask, positions=None, retrieve_index=None,
                            retrieve_next_token=None, retrieve_next_sibling=None, retrieve_cum_len=None,
                            spec_steps=width - 1, topk=2, draft_token_num=width,
                            capture_hidden_mode=CaptureHiddenMode.FULL, seq_lens_sum=None, seq_lens_cpu=None)


def tree_blocks(bs: int, width: int, gen):
    """Per request, a random draft tree over ``width`` new tokens as a
    ``[width, width]`` bool block: token t sees itself and its ancestors."""
    blocks = []
    for _ in range(bs):
        block = torch.eye(width, dtype=torch.bool)
        for t in range(1, width):
            parent = int(torch.randint(0, t, (1,), generator=gen))
            block[t] |= block[parent]
        blocks.append(block)
    return blocks


def flat_mask(prefixes, blocks):
    """SGLang's flat verify mask: per request ``width`` rows of ``prefix + width``."""
    rows = [torch.cat([torch.ones(b.shape[0], p, dtype=torch.bool), b], dim=1).reshape(-1) for p, b in zip(prefixes, blocks)]
    return torch.cat(rows)


def reference(batch, attn, blocks):
    """Attention from the batch definition, request i's new tokens masked by ``blocks[i]``."""
    k_cache, v_cache = h.kv_buffers(attn)
    out = torch.empty_like(batch.q)
    for i, prefix in enumerate(batch.prefixes):
        rows = slice(i * batch.width, (i + 1) * batch.width)
        slots = h.req_to_token_of(attn)[i, : prefix + batch.width].long()
        out[rows] = attend(batch.q[rows], k_cache[slots], v_cache[slots], prefix, h.HEAD_DIM**-0.5, blocks[i])
    return out


@contextlib.contextmanager
def published(monkeypatch, name: str, algorithm_name: str, ndt: int, max_bs: int):
    """Server args for backend ``name`` and ``algorithm_name`` at ``ndt``,
    published the release's way, with one attention rank."""
    fields = dict(attention_backend=name, speculative_algorithm=algorithm_name, speculative_num_draft_tokens=ndt,
                  speculative_eagle_topk=1, speculative_num_steps=ndt - 1, max_running_requests=max_bs)
    with h.single_attention_rank(monkeypatch), runner_drive.published(**fields) as server_args:
        yield server_args


def forward(attn, fb, batch):
    """The backend's TARGET_VERIFY ``forward_extend`` with the new tokens' keys
    and values as the model passes them (triton reads them from there, the
    paged backends from the pool, where ``make_batch`` already wrote them)."""
    from sglang.srt.layers.radix_attention import RadixAttention

    layer = RadixAttention(h.NUM_HEADS, h.HEAD_DIM, h.HEAD_DIM**-0.5, h.NUM_KV_HEADS, layer_id=0)
    k_cache, v_cache = h.kv_buffers(attn)
    table = h.req_to_token_of(attn)
    new = torch.cat([table[i, p:p + batch.width] for i, p in enumerate(batch.prefixes)]).long()
    n = batch.q.shape[0]
    out = attn.forward_extend(batch.q.reshape(n, -1), k_cache[new], v_cache[new], layer, fb, save_kv_cache=False)
    return out.reshape(batch.q.shape)


def forward_batch(batch, attn, spec_info, algorithm):
    """``testing.trtllm.forward_batch`` for ``algorithm`` with ``spec_info``,
    carrying the pool 0.5.12's flashinfer forward reads from the batch."""
    fb = h.forward_batch(batch, attn)
    fb.spec_info, fb.spec_algorithm = spec_info, algorithm
    fb.token_to_kv_pool = h._RUNNERS[attn].token_to_kv_pool
    return fb
