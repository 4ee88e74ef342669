"""TARGET_VERIFY layer step on an H200 through SGLang's own attention backends.

Run on the GPU machine, one SGLang release per process (its ``.py`` source
first on ``sys.path``), with this repository's package on the path:

    python3 benchmarks/gpu_layer_step.py --out $OUT/layer_0.5.21.json [--ceilings] [--backends trtllm_mha flashinfer]

One Llama-3-8B-shaped decoder layer (hidden 4096, 32 query / 8 KV heads of
128, MLP 14336, bf16, RMSNorm, no rotary embedding: its cost is a few
elementwise passes and the same at every width), whose attention is the
release's real backend (``TRTLLMHAAttnBackend``, which on SM90 runs
flashinfer's XQA kernel with the spec-decode mask; ``FlashInferAttnBackend``)
over SGLang's own KV pools. Each configuration is captured in a CUDA graph
the way SGLang's decode graph runner does it: the backend's
``init_cuda_graph_state``, then ``init_forward_metadata_out_graph(in_capture=True)``
outside the graph, two warm-up forwards, and ``init_forward_metadata_in_graph``
+ the layer forward inside it; each step is ``init_forward_metadata_out_graph``
(the replay metadata) followed by the graph's replay, and that is what is timed
(CUDA events, median of ``--iters``).

For bs in 1, 8, 32, 64, context 1024 and 4096, width k in 2, 4, 8:
(a) the plugin width k on a backend built for ndt 16, with this package's
patches applied; (b) a backend built for ndt k (native); (c) width 16 at ndt 16.
The ndt-16 backend is built again after the native ones and its (a) cells are
measured a second time (``plugin_again``: how far the numbers drift within a
run), and on trtllm_mha a control runs the (a) cells of bs 8, context 1024
with the patches reverted (``unpatched``). Every configuration's layer output
and attention output are compared with a float32 torch reference of the same
layer (relative Frobenius error) after a replay at the timed lengths (every
request at the context length) and again after a replay with new, random
sequence lengths. Besides the step, each cell records the graph replay alone
(``graph_ms``) and the host time of the replay metadata (``host_metadata_ms``).

What is built by hand, and why (SGLang needs a whole server for the rest):
the model runner is a ``SimpleNamespace`` with SGLang's own ``ReqToTokenPool``
and ``MHATokenToKVPool``; the ``ForwardBatch`` is a namespace holding the
fields the backends read; configuration is published with the release's own
runtime-context override (``sglang_spec_plugins.testing.trtllm._published``).
The verify input for the flashinfer backend is the release's own
``DFlashVerifyInput`` for a linear chain (causal within the block, no custom
mask), built for capture and replay alike, as a chain drafter's worker builds
it: SGLang's decode graph runner would capture a plugin algorithm with
``spec_info=None`` (issue 8), which flashinfer refuses. trtllm_mha reads no
verify input. CUDA-only packages that are not carried (``sgl_kernel``, and
flashinfer submodules newer than the carried 0.6.18) are stand-in modules
whose every function fails if called; the names that were stood in are listed
in the results, and none is called on the measured path.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN = 4096, 32, 8, 128, 14336
PAGE = 16
BATCHES, CONTEXTS, WIDTHS, NDT = (1, 8, 32, 64), (1024, 4096), (2, 4, 8), 16
STOOD_IN: list = []


class _AbsentKernels(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on ``sys.meta_path``: any ``sgl_kernel`` module, and any
    ``flashinfer`` submodule the carried flashinfer lacks, becomes a module
    whose every attribute is a function that fails when called."""

    def find_spec(self, name, path, target=None):
        root = name.split(".")[0]
        if root == "sgl_kernel" or (root == "flashinfer" and "." in name):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        STOOD_IN.append(spec.name)

        def __getattr__(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _Unreachable(f"{spec.name}.{attr}")

        module.__getattr__ = __getattr__
        return module

    def exec_module(self, module):
        pass


class _Unreachable:
    """A name from a stand-in module: attribute and item access give more of
    them (module-level tables such as ``scalar_types.uint4b8``); calling one fails."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unreachable(f"{self._name}.{attr}")

    def __getitem__(self, key):
        return _Unreachable(f"{self._name}[{key!r}]")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} is a stand-in (package not carried) and was called")


# -- the model runner and the batch -------------------------------------------------------------


class _Config(SimpleNamespace):
    def get_num_kv_heads(self, tp_size, dcp_size=1):
        return KV_HEADS

    def get_num_attention_heads(self, tp_size):
        return HEADS

    def get_max_num_attention_heads(self):
        return HEADS


def model_runner(server_args, name: str, max_bs: int, max_context: int):
    import inspect

    import torch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    def accepts(cls, **kw):  # the pools' keyword arguments vary across releases
        params = inspect.signature(cls).parameters
        return cls(**{k: v for k, v in kw.items() if k in params})

    req_to_token_pool = accepts(ReqToTokenPool, size=max_bs + 1, max_context_len=max_context, device="cuda",
                                enable_memory_saver=False)
    kv_pool = accepts(MHATokenToKVPool, size=(max_bs + 1) * max_context + PAGE, page_size=PAGE, dtype=torch.bfloat16,
                      head_num=KV_HEADS, head_dim=HEAD_DIM, layer_num=1, device="cuda", enable_memory_saver=False,
                      enable_alt_stream=False)
    config = _Config(context_len=max_context, hidden_size=HIDDEN, num_attention_heads=HEADS,
                     num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, v_head_dim=HEAD_DIM, is_multimodal=False,
                     is_encoder_decoder=False, hf_config=SimpleNamespace(architectures=["LlamaForCausalLM"]),
                     attention_arch=None, is_hybrid_swa=False, dtype=torch.bfloat16)
    runner = SimpleNamespace(
        server_args=server_args, model_config=config, device="cuda", gpu_id=0, dtype=torch.bfloat16,
        kv_cache_dtype=torch.bfloat16, kv_cache_dtype_str="auto", page_size=PAGE, req_to_token_pool=req_to_token_pool,
        token_to_kv_pool=kv_pool, token_to_kv_pool_allocator=SimpleNamespace(page_size=PAGE, get_kvcache=lambda: kv_pool),
        prefill_attention_backend_str=name, decode_attention_backend_str=name, sliding_window_size=None,
        is_hybrid_swa=False, is_draft_worker=False, max_running_requests=max_bs, model=torch.nn.Module(),
        use_mla_backend=False, attention_chunk_size=None,
    )
    model_runner_cls = importlib.import_module("sglang.srt.model_executor.model_runner").ModelRunner
    if hasattr(model_runner_cls, "init_kv_index_translator"):  # where backends read KV ids through one
        model_runner_cls.init_kv_index_translator(runner)
    return runner


class _ForwardBatch(SimpleNamespace):
    """A namespace SGLang can hold a weak reference to."""


def forward_batch_defaults() -> dict:
    """The release's own ForwardBatch field defaults (fields come and go across releases)."""
    import dataclasses

    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    out = {}
    for f in dataclasses.fields(ForwardBatch):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


class Layer:
    """The decoder layer's weights and its forward around ``attention(q, k, v)``."""

    def __init__(self, gen):
        import torch

        def w(rows, cols):
            return (torch.randn(rows, cols, generator=gen, device="cuda") / rows**0.5).to(torch.bfloat16)

        self.qkv = w(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM)
        self.o = w(HEADS * HEAD_DIM, HIDDEN)
        self.gate_up = w(HIDDEN, 2 * FFN)
        self.down = w(FFN, HIDDEN)
        self.norm1 = torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16)
        self.norm2 = torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16)
        self.bytes = sum(t.numel() * 2 for t in (self.qkv, self.o, self.gate_up, self.down))
        self.params = self.bytes // 2

    def forward(self, x, attention, dtype=None):
        """Returns (layer output, attention output); ``dtype`` float32 for the reference."""
        import torch

        p = (lambda t: t.to(dtype)) if dtype else (lambda t: t)
        x = p(x)

        def rms(t, weight):
            t32 = t.float()
            return (t32 * torch.rsqrt(t32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(t.dtype) * p(weight)

        qkv = rms(x, self.norm1) @ p(self.qkv)
        q, k, v = qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
        attn = attention(q.contiguous(), k.contiguous(), v.contiguous())
        x = x + attn @ p(self.o)
        gate, up = (rms(x, self.norm2) @ p(self.gate_up)).chunk(2, dim=-1)
        x = x + (torch.nn.functional.silu(gate) * up) @ p(self.down)
        return x, attn


# -- one backend, its graphs --------------------------------------------------------------------


class Bench:
    """One backend instance built for ``ndt``, with its pools, slots and graphs."""

    def __init__(self, name, ndt, layer, max_bs, max_context, gen):
        import torch
        from sglang.srt.layers.radix_attention import RadixAttention
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.name, self.ndt, self.layer, self.gen = name, ndt, layer, gen
        self.runner = model_runner(published_args(), name, max_bs, max_context)
        self.runner.spec_algorithm = SpeculativeAlgorithm.EAGLE
        module = importlib.import_module(BACKENDS[name])
        cls = getattr(module, "TRTLLMHAAttnBackend" if name == "trtllm_mha" else "FlashInferAttnBackend")
        self.attn = cls(self.runner)
        self.attn.init_cuda_graph_state(max_bs, max_bs * max(ndt, NDT))
        self.radix = RadixAttention(HEADS, HEAD_DIM, HEAD_DIM**-0.5, KV_HEADS, layer_id=0)
        self.max_context = max_context
        # Request i's KV slots: a random permutation of its own pages (row i of req_to_token).
        pages_per_req = max_context // PAGE
        table = self.runner.req_to_token_pool.req_to_token
        for i in range(max_bs):
            pages = torch.randperm(pages_per_req, generator=gen, device="cuda") + 1 + i * pages_per_req
            table[i, :max_context] = ((pages[:, None] * PAGE + torch.arange(PAGE, device="cuda"))
                                      .flatten()[:max_context].to(table.dtype))
        k, v = self.kv()
        k.copy_(torch.randn(k.shape, generator=gen, device="cuda").to(k.dtype))
        v.copy_(torch.randn(v.shape, generator=gen, device="cuda").to(v.dtype))

    def kv(self):
        return self.runner.token_to_kv_pool.get_kv_buffer(0)

    def batch(self, bs, width, prefixes):
        """The TARGET_VERIFY ForwardBatch (static buffers a replay refills)."""
        import torch
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        n = bs * width
        seq_lens = torch.tensor(prefixes, dtype=torch.int64, device="cuda")
        fb = _ForwardBatch(**forward_batch_defaults())
        vars(fb).update(
            forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, input_ids=torch.zeros(n, dtype=torch.int64, device="cuda"),
            positions=torch.zeros(n, dtype=torch.int64, device="cuda"), seq_lens=seq_lens,
            seq_lens_cpu=seq_lens.cpu(), seq_lens_sum=int(sum(prefixes)),
            req_pool_indices=torch.arange(bs, device="cuda"), req_to_token_pool=self.runner.req_to_token_pool,
            token_to_kv_pool=self.runner.token_to_kv_pool, attn_backend=self.attn,
            encoder_lens=None, out_cache_loc=torch.zeros(n, dtype=torch.int64, device="cuda"),
            spec_info=self.verify_input(width), kv_loc_plan=None, extend_seq_lens_cpu=None,
            extend_prefix_lens=None, extend_prefix_lens_cpu=None, attn_cp_metadata=None, spec_algorithm=None,
            mha_one_shot=False,
        )
        self.refill(fb, prefixes, width)
        return fb

    def verify_input(self, width):
        """trtllm_mha reads none; flashinfer gets the release's DFLASH verify input for a chain."""
        if self.name == "trtllm_mha":
            return None
        from sglang.srt.speculative.dflash_info import DFlashVerifyInput

        return DFlashVerifyInput(draft_token=None, positions=None, draft_token_num=width, custom_mask=None)

    def refill(self, fb, prefixes, width):
        """New sequence lengths into the batch's static buffers (as a replay's prepare does)."""
        import torch

        bs = fb.batch_size
        fb.seq_lens.copy_(torch.tensor(prefixes, dtype=torch.int64))
        # DFLASH verify batches carry the verify window in seq_lens_cpu (flashinfer's sync-free replay plan reads it).
        fb.seq_lens_cpu = fb.seq_lens.cpu() + (width if self.name == "flashinfer" else 0)
        fb.seq_lens_sum = int(sum(prefixes))
        table = self.runner.req_to_token_pool.req_to_token
        slots = torch.stack([table[i, p:p + width] for i, p in enumerate(prefixes)]).flatten()
        fb.out_cache_loc.copy_(slots.to(torch.int64))
        fb.positions.copy_((fb.seq_lens[:, None] + torch.arange(width, device="cuda")).flatten())
        if importlib.util.find_spec("sglang.srt.mem_cache.kv_loc_plan"):  # 0.5.22+: pages are read through a plan
            from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan

            fb.kv_loc_plan = KVLocPlan(source=self.attn.kv_index_translator, req_pool_indices=fb.req_pool_indices[:bs],
                                       seq_lens=fb.seq_lens, seq_lens_cpu=fb.seq_lens_cpu, write_virtual=None,
                                       read_extent=width)

    def attention(self, fb):
        def run(q, k, v):
            out = self.attn.forward_extend(q, k.view(-1, KV_HEADS, HEAD_DIM), v.view(-1, KV_HEADS, HEAD_DIM),
                                           self.radix, fb, save_kv_cache=True)
            return out.view(q.shape[0], -1)

        return run

    def capture(self, bs, width, prefixes):
        """Capture the layer step as SGLang's decode graph runner does; returns (graph, fb, x, outputs)."""
        import torch

        fb = self.batch(bs, width, prefixes)
        x = torch.randn(bs * width, HIDDEN, generator=self.gen, device="cuda").to(torch.bfloat16)
        self.attn.init_forward_metadata_out_graph(fb, in_capture=True)
        in_graph = getattr(self.attn, "init_forward_metadata_in_graph", None)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # the runner's two warm-up runs
                if in_graph:
                    in_graph(fb)
                self.layer.forward(x, self.attention(fb))
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            if in_graph:
                in_graph(fb)
            outputs = self.layer.forward(x, self.attention(fb))
        return graph, fb, x, outputs

    def replay(self, graph, fb, prefixes, width):
        """A step at new sequence lengths: refill the static buffers, then ``step``."""
        self.refill(fb, prefixes, width)
        self.step(graph, fb)

    def step(self, graph, fb):
        """What a serving step runs: the replay metadata, then the graph."""
        self.attn.init_forward_metadata_out_graph(fb, in_capture=False)
        graph.replay()

    def reference(self, x, fb, width):
        """The layer in float32 from the batch definition: request i's query t sees
        its prefix and new tokens 0..t (the new K/V as the step wrote them)."""
        import torch

        k_pool, v_pool = self.kv()
        table = self.runner.req_to_token_pool.req_to_token
        prefixes = fb.seq_lens.tolist()

        def attention(q, k_new, v_new):
            out = torch.empty_like(q)
            k_new, v_new = k_new.view(-1, KV_HEADS, HEAD_DIM), v_new.view(-1, KV_HEADS, HEAD_DIM)
            for i, p in enumerate(prefixes):
                slots = table[i, :p].long()
                rows = slice(i * width, (i + 1) * width)
                k = torch.cat([k_pool[slots].float(), k_new[rows]])  # the new tokens' keys from this projection
                v = torch.cat([v_pool[slots].float(), v_new[rows]])
                qi = q[rows].view(width, HEADS, HEAD_DIM).transpose(0, 1)
                ki = k.transpose(0, 1).repeat_interleave(HEADS // KV_HEADS, 0)
                vi = v.transpose(0, 1).repeat_interleave(HEADS // KV_HEADS, 0)
                mask = torch.ones(width, p + width, dtype=torch.bool, device="cuda").tril(diagonal=p)
                o = torch.nn.functional.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, scale=HEAD_DIM**-0.5)
                out[rows] = o.transpose(0, 1).reshape(width, -1)
            return out

        return self.layer.forward(x, attention, dtype=torch.float32)


BACKENDS = {"trtllm_mha": "sglang.srt.layers.attention.trtllm_mha_backend",
            "flashinfer": "sglang.srt.layers.attention.flashinfer_backend"}
_ARGS: list = []


def published_args():
    return _ARGS[-1]


def rel_err(got, want) -> float:
    got, want = got.float(), want.float()
    return float((got - want).norm() / want.norm()) if bool(got.isfinite().all()) else float("nan")


def median_ms(fn, iters):
    import torch

    times = []
    for _ in range(5):
        fn()
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def interleaved(name, layer, gen, max_bs, max_context, args, result, harness):
    """(a) and (b) timed alternately: a backend for ndt 16 and one for ndt k alive
    together, their graphs captured, then ``rounds`` rounds of (a) then (b),
    each a median over ``iters`` steps; a cell's number is the median of its
    rounds. Removes drift over a run from the a/b comparison."""
    import pytest
    import torch

    rounds = 7
    with pytest.MonkeyPatch.context() as mp, harness._published(mp, NDT, max_bs, name) as server_args:
        _ARGS.append(server_args)
        bench_a = Bench(name, NDT, layer, max_bs, max_context, gen)
        for k in args.widths:
            with harness._published(mp, k, max_bs, name) as native_args:
                _ARGS.append(native_args)
                bench_b = Bench(name, k, layer, max_bs, max_context, gen)
                for bs in args.batches:
                    for ctx in args.contexts:
                        timed = [ctx] * bs
                        pair = {}
                        for kind, bench in (("plugin_il", bench_a), ("native_il", bench_b)):
                            graph, fb, x, (out, attn_out) = bench.capture(bs, k, timed)
                            bench.replay(graph, fb, timed, k)
                            torch.cuda.synchronize()
                            ref, ref_attn = bench.reference(x, fb, k)
                            pair[kind] = (bench, graph, fb, {"backend": name, "ndt": bench.ndt, "bs": bs, "ctx": ctx,
                                                             "width": k, "kind": kind, "rel_err": rel_err(out, ref),
                                                             "attn_rel_err": rel_err(attn_out, ref_attn),
                                                             "step_rounds": [], "graph_rounds": []})
                        for _ in range(rounds):
                            for bench, graph, fb, cell in pair.values():
                                cell["step_rounds"].append(median_ms(lambda: bench.step(graph, fb), args.iters))
                                cell["graph_rounds"].append(median_ms(graph.replay, args.iters))
                        for _, _, _, cell in pair.values():
                            cell["step_ms"] = sorted(cell["step_rounds"])[rounds // 2]
                            cell["graph_ms"] = sorted(cell["graph_rounds"])[rounds // 2]
                            result["cells"].append(cell)
                            print(json.dumps({k2: v for k2, v in cell.items() if not k2.endswith("rounds")}), flush=True)
                        pair = None
                _ARGS.pop()
                del bench_b
                torch.cuda.empty_cache()
        _ARGS.pop()


def host_ms(fn, iters: int = 30) -> float:
    """Median host wall time of ``fn`` with the GPU idle before each call."""
    import torch

    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1e3)
    torch.cuda.synchronize()
    times.sort()
    return times[len(times) // 2]


# -- ceilings ------------------------------------------------------------------------------------


def ceilings():
    import torch

    n = 4 << 30  # 4 GiB, far beyond L2
    src = torch.randn(n // 4, device="cuda").view(torch.uint8)
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src), 20)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    gemm_ms = median_ms(lambda: a @ b, 30)
    del src, dst
    return {"copy_GBps": round(2 * n / copy_ms / 1e6, 1), "bf16_gemm_TFLOPs": round(2 * 8192**3 / gemm_ms / 1e9, 1),
            "how": "device-to-device copy of 4 GiB (bytes read + written) and an 8192^3 bf16 matmul on random data, "
                   "medians of CUDA-event timings"}


# -- the run -------------------------------------------------------------------------------------


def run(args):
    import torch

    sys.meta_path.append(_AbsentKernels())
    sys.path.insert(0, str(ROOT))
    import sglang

    from sglang_spec_plugins.engine.probe import installed_version
    from sglang_spec_plugins.patches import PATCHES, apply_all, revert_all
    from sglang_spec_plugins.testing import trtllm as harness

    release = getattr(sglang, "__version__", None) or installed_version()
    plans = apply_all(PATCHES, release)  # patched before the backends' modules are imported
    result = {"release": release, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d"), "patches_applied": sorted(n for n, p in plans.items() if p.verdict == "apply"),
              "cells": [], "errors": []}
    try:
        import flashinfer

        result["flashinfer"] = flashinfer.__version__
    except Exception as exc:  # reported, the backends will fail to build
        result["errors"].append(f"import flashinfer: {exc!r}")
    if args.ceilings:
        result["ceilings"] = ceilings()
        print(json.dumps(result["ceilings"]), flush=True)
    os.environ.setdefault("SGLANG_FLASHINFER_WORKSPACE_SIZE", str(256 << 20))
    gen = torch.Generator(device="cuda").manual_seed(0)
    layer = Layer(gen)
    result["layer"] = {"params": layer.params, "weight_bytes": layer.bytes}
    max_bs, max_context = max(args.batches), max(args.contexts) + 64
    rng = torch.Generator().manual_seed(1)
    started = time.time()
    import pytest

    if args.interleave:
        for name in args.backends:
            interleaved(name, layer, gen, max_bs, max_context, args, result, harness)
        args.backends = []
    for name in args.backends:
        # ndt 16 twice, first and last: the plugin cells measured again after the native ones show drift.
        for ndt, again in ((NDT, False),) + tuple((w, False) for w in args.widths) + ((NDT, True),):
            kinds = ["plugin_again"] if again else ["plugin", "full"] if ndt == NDT else ["native"]
            if ndt == NDT and not again and name == "trtllm_mha":
                kinds.append("unpatched")  # the control: the same cells without this package's patches
            plan = [(bs, ctx, w, kind) for kind in kinds for bs in args.batches for ctx in args.contexts
                    for w in ((NDT,) if kind == "full" else args.widths if ndt == NDT else (ndt,))
                    if kind != "unpatched" or (bs, ctx) == (8, 1024)]
            with pytest.MonkeyPatch.context() as mp, harness._published(mp, ndt, max_bs, name) as server_args:
                _ARGS.append(server_args)
                try:
                    bench = Bench(name, ndt, layer, max_bs, max_context, gen)
                except Exception as exc:
                    result["errors"].append(f"{name} ndt {ndt}: building the backend: {type(exc).__name__}: {exc}"[:2000])
                    print(result["errors"][-1], flush=True)
                    continue
                for bs, ctx, width, kind in plan:
                    cell = {"backend": name, "ndt": ndt, "bs": bs, "ctx": ctx, "width": width, "kind": kind}
                    if kind == "unpatched":
                        revert_all(PATCHES)
                    try:
                        timed = [ctx] * bs
                        graph, fb, x, (out, attn_out) = bench.capture(bs, width, timed)
                        bench.replay(graph, fb, timed, width)
                        torch.cuda.synchronize()
                        ref, ref_attn = bench.reference(x, fb, width)
                        cell["rel_err"] = rel_err(out, ref)
                        cell["attn_rel_err"] = rel_err(attn_out, ref_attn)
                        new = torch.randint(ctx // 2, ctx, (bs,), generator=rng).tolist()
                        bench.replay(graph, fb, new, width)
                        torch.cuda.synchronize()
                        ref, ref_attn = bench.reference(x, fb, width)
                        cell["rel_err_new_lens"] = rel_err(out, ref)
                        cell["attn_rel_err_new_lens"] = rel_err(attn_out, ref_attn)
                        bench.refill(fb, timed, width)
                        cell["step_ms"] = median_ms(lambda: bench.step(graph, fb), args.iters)
                        cell["graph_ms"] = median_ms(graph.replay, args.iters)
                        cell["host_metadata_ms"] = host_ms(lambda: bench.attn.init_forward_metadata_out_graph(fb, in_capture=False))
                    except Exception as exc:
                        cell["error"] = f"{type(exc).__name__}: {exc}"[:1500]
                    if kind == "unpatched":
                        apply_all(PATCHES, release)
                    graph = fb = x = out = attn_out = None  # each graph owns its memory pool; freed here
                    result["cells"].append(cell)
                    print(json.dumps(cell), flush=True)
                    if args.out:
                        args.out.write_text(json.dumps(dict(result, stood_in=sorted(set(STOOD_IN))), indent=1))
                _ARGS.pop()
                del bench
                torch.cuda.empty_cache()
    result["stood_in"] = sorted(set(STOOD_IN))
    result["wall_s"] = round(time.time() - started, 1)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--ceilings", action="store_true")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS))
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    parser.add_argument("--contexts", type=int, nargs="+", default=list(CONTEXTS))
    parser.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS))
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--interleave", action="store_true", help="time (a) and (b) alternately (see interleaved)")
    parser.add_argument("--summarize", nargs="+", type=Path, help="print the tables of these result files (no GPU)")
    parser.add_argument("--metric", choices=("step_ms", "graph_ms", "host_metadata_ms"), default="step_ms")
    args = parser.parse_args()
    if args.summarize:
        print(summarize(args.summarize, args.metric))
    else:
        run(args)



# -- tables (any machine) ------------------------------------------------------------------------


ERRORS = ("rel_err", "attn_rel_err", "rel_err_new_lens", "attn_rel_err_new_lens")


def floor_ms(cell, weight_bytes, copy_gbps) -> float:
    """The byte floor of one step: the layer's weights plus the KV it reads
    (every request's context and new tokens, K and V, bf16) at the measured copy bandwidth."""
    kv = cell["bs"] * (cell["ctx"] + cell["width"]) * KV_HEADS * HEAD_DIM * 2 * 2
    return (weight_bytes + kv) / copy_gbps / 1e6


def summarize(files, metric: str) -> str:
    """Markdown tables: per release and backend, (a) plugin width k at ndt 16, (b) native ndt = k,
    their ratio, and (c) width 16 over (a); plus each (a) cell's distance from its byte floor."""
    runs = [json.loads(Path(f).read_text()) for f in files]
    ceilings = next((r["ceilings"] for r in runs if r.get("ceilings")), None)
    lines, worst, gains = [], 0.0, []
    for r in runs:
        cells = {(c["backend"], c["kind"], c["bs"], c["ctx"], c["width"]): c for c in r["cells"] if "error" not in c}
        for backend in BACKENDS:
            if not any(k[0] == backend and k[1] == "plugin" for k in cells):
                continue  # (an --interleave run has its own cells: see benchmarks/METHODS.md)
            lines += [f"\n**SGLang {r['release']}, {backend}** ({metric}, ms; a = plugin width k at ndt 16, "
                      f"b = native ndt k, c = width 16)\n",
                      "| bs | ctx | " + " | ".join(f"k={k}: a / b / a÷b" for k in WIDTHS) + " | c | "
                      + " | ".join(f"c÷a k={k}" for k in WIDTHS) + " | a k=2 ÷ floor |",
                      "|---|---|" + "---|" * (2 * len(WIDTHS) + 2)]
            table_ab, table_again = [], []
            for bs in BATCHES:
                for ctx in CONTEXTS:
                    full = cells.get((backend, "full", bs, ctx, NDT))
                    row, ratios = [], []
                    for k in WIDTHS:
                        a, b = cells.get((backend, "plugin", bs, ctx, k)), cells.get((backend, "native", bs, ctx, k))
                        if a and b:
                            ab = a[metric] / b[metric]
                            worst = max(worst, abs(ab - 1))
                            table_ab.append(ab)
                            again = cells.get((backend, "plugin_again", bs, ctx, k))
                            if again:
                                table_again.append(again[metric] / a[metric])
                            row.append(f"{a[metric]:.3f} / {b[metric]:.3f} / {ab:.2f}")
                        else:
                            row.append("-")
                        ratios.append(f"{full[metric] / a[metric]:.2f}" if a and full else "-")
                        if a and full:
                            gains.append(full[metric] / a[metric])
                    a2 = cells.get((backend, "plugin", bs, ctx, WIDTHS[0]))
                    fl = (f"{a2[metric] / floor_ms(a2, r['layer']['weight_bytes'], ceilings['copy_GBps']):.1f}"
                          if a2 and ceilings else "-")
                    lines.append(f"| {bs} | {ctx} | " + " | ".join(row) + f" | {full[metric]:.3f} | " if full else "| - | ")
                    lines[-1] += " | ".join(ratios) + f" | {fl} |"
            lines.append(f"\na÷b from {min(table_ab):.3f} to {max(table_ab):.3f}"
                         + (f"; the plugin cells measured again after the native ones: {min(table_again):.2f} to "
                            f"{max(table_again):.2f} of the first" if table_again else ""))
    head = [f"worst |a÷b - 1| over every cell: {worst:.3f}; c÷a from {min(gains):.2f} to {max(gains):.2f}"]
    for r in runs:
        cells = [c for c in r["cells"] if "error" not in c]
        errs = [max(c[k] for k in ERRORS) for c in cells if c["kind"] != "unpatched"]
        again = {(c["backend"], c["bs"], c["ctx"], c["width"]): c[metric] for c in cells if c["kind"] == "plugin_again"}
        drift = [again[k] / c[metric] for c in cells if c["kind"] == "plugin"
                 for k in [(c["backend"], c["bs"], c["ctx"], c["width"])] if k in again]
        control = [max(c["attn_rel_err"], c["attn_rel_err_new_lens"]) for c in cells if c["kind"] == "unpatched"]
        head.append(f"SGLang {r['release']}: {len(cells)} cells ran, {len(r['cells']) - len(cells)} failed; largest relative "
                    f"error {max(errs):.4f} (layer and attention output, timed and new lengths)"
                    + (f"; the same plugin cells measured again at the end: {min(drift):.2f} to {max(drift):.2f} of the first"
                       if drift else "")
                    + (f"; without the patches (control, bs 8, ctx 1024): attention error {min(control):.3f} to {max(control):.3f}"
                       if control else ""))
    if ceilings:
        head.append(f"ceilings: copy {ceilings['copy_GBps']} GB/s, bf16 GEMM {ceilings['bf16_gemm_TFLOPs']} TFLOP/s")
    return "\n".join(head + lines)


if __name__ == "__main__":
    main()
