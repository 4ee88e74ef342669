"""A plugin worker's own draft model: its TpModelWorker and ModelRunner (imports SGLang).

PROTOTYPE home (moves to the public worker module once the layering lands).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import inspect
from typing import Any

from .worker_contract import worker_base


def _module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def build_draft_worker(server_args: Any, target_worker: Any, release_kwargs: dict, label: str):
    """SGLang's draft ``TpModelWorker(is_draft_worker=True)`` for
    ``--speculative-draft-model-path``, with the target's context length, the
    draft attention backend SGLang resolves for its own draft workers, and
    ``draft_runner`` / ``draft_runners`` (what SGLang reads for runner discovery)."""
    common = _module("sglang.srt.speculative.draft_worker_common")
    build = getattr(common, "build_draft_tp_worker", None)
    target_config = target_worker.model_runner.model_config
    if build is not None:  # 0.5.16+
        offered = dict(server_args=server_args, nccl_port=release_kwargs.get("nccl_port"),
                       gpu_id=release_kwargs.get("gpu_id"), target_model_config=target_config, algo_label=label)
        if "ps" in release_kwargs:  # 0.5.16-0.5.20: the draft never spans pipeline stages
            offered["ps"] = dataclasses.replace(release_kwargs["ps"], pp_rank=0)
        wanted = inspect.signature(build).parameters
        spec_utils = importlib.import_module("sglang.srt.speculative.spec_utils")
        scope = getattr(spec_utils, "draft_pp_context", None)
        import contextlib

        with (scope() if scope is not None else contextlib.nullcontext()):
            bundle = build(**{k: v for k, v in offered.items() if k in wanted})
        worker = bundle.draft_worker
    else:  # 0.5.14-0.5.15: the worker builds it, as DFLASH does there
        worker = _build_draft_worker_014(server_args, target_worker, release_kwargs)
    runner = worker.model_runner
    worker.draft_runner = runner
    worker.draft_runners = [runner]
    if getattr(runner.model_config, "vocab_size", None) is None:
        runner.model_config.vocab_size = target_config.vocab_size
    return worker


def _build_draft_worker_014(server_args, target_worker, release_kwargs):
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.server_args import get_global_server_args, set_global_server_args_for_scheduler

    draft_args = copy.deepcopy(server_args)
    draft_args.skip_tokenizer_init = True
    backend = draft_args.speculative_draft_attention_backend or draft_args.get_attention_backends()[0]
    draft_args.speculative_draft_attention_backend = None
    draft_args.prefill_attention_backend = None
    draft_args.decode_attention_backend = None
    draft_args.attention_backend = backend
    draft_args.context_length = target_worker.model_runner.model_config.context_len
    wanted = inspect.signature(TpModelWorker).parameters
    kwargs = {k: v for k, v in release_kwargs.items() if k in wanted and k != "target_worker"}
    saved = get_global_server_args()
    try:
        return TpModelWorker(server_args=draft_args, pp_rank=0, is_draft_worker=True, **kwargs)
    finally:
        set_global_server_args_for_scheduler(saved)


def forward_target(target_worker, batch, capture_hidden_mode=None, **kwargs):
    """``target_worker.forward_batch_generation(batch, ...)`` asking for
    ``capture_hidden_mode`` the way the release takes it."""
    if capture_hidden_mode is not None:
        if "capture_hidden_mode" in inspect.signature(target_worker.forward_batch_generation).parameters:
            kwargs["capture_hidden_mode"] = capture_hidden_mode
        else:  # 0.5.14-0.5.15: read off the batch
            batch.capture_hidden_mode = capture_hidden_mode
    return target_worker.forward_batch_generation(batch, **kwargs)


@functools.lru_cache(maxsize=None)
def draft_model_worker_base() -> type:
    """:func:`worker_base` for a worker with its own draft model."""

    class DraftModelSpecWorker(worker_base()):
        def __init__(self, server_args, target_worker, **release_kwargs):
            super().__init__(server_args, target_worker, **release_kwargs)
            label = str(server_args.speculative_algorithm).upper()
            self.draft_worker = build_draft_worker(server_args, target_worker, release_kwargs, label)
            self.draft_runner = self.draft_worker.model_runner
            self.model_runner = self.draft_runner

        def alloc_memory_pool(self, memory_pool_config=None, req_to_token_pool=None, token_to_kv_pool_allocator=None, **kw):
            self.draft_worker.alloc_memory_pool(memory_pool_config=memory_pool_config, req_to_token_pool=req_to_token_pool,
                                                token_to_kv_pool_allocator=token_to_kv_pool_allocator)
            self.req_to_token_pool = req_to_token_pool
            self.token_to_kv_pool_allocator = token_to_kv_pool_allocator

        def init_attention_backends(self):
            self.draft_worker.init_attention_backends()

        def init_cuda_graphs(self):
            self.draft_worker.init_cuda_graphs()

    return DraftModelSpecWorker
