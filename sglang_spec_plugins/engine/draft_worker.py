"""The base class of a plugin worker with a draft model of its own (imports SGLang).

:func:`draft_model_worker_base` is :func:`~.worker_base.worker_base` whose
``draft_worker`` is a real SGLang ``TpModelWorker(is_draft_worker=True)``
built the way the release builds DFLASH's: from ``--speculative-draft-model-path``
(and ``--speculative-draft-load-format``, ``dummy`` included), at the
target's context length, with the draft attention backend SGLang resolves
for its draft workers, and, under the plugin algorithm, the draft runner's
TARGET_VERIFY at the width the plugin answers with ``is_draft_worker=True``.
The scheduler then allocates its KV pool over the target's token ids,
builds its attention backends and captures its CUDA graphs through the
base's ``alloc_memory_pool`` / ``init_attention_backends`` / ``init_cuda_graphs``.

How the release builds it: 0.5.16+ SGLang's own
``draft_worker_common.build_draft_tp_worker`` (inside ``draft_pp_context``
where the release has it), called with the arguments its signature takes;
0.5.14-0.5.15 (no builder) the worker does what DFLASH's does there:
a copy of the server arguments with the draft backend, ``pp_rank=0``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import importlib
import inspect
from typing import Any, Dict

from .worker_base import worker_base

BUILDER = ("sglang.srt.speculative.draft_worker_common", "build_draft_tp_worker")
"""SGLang's draft TpModelWorker builder (0.5.16+)."""


def build_draft_worker(server_args: Any, target_worker: Any, release_kwargs: Dict[str, Any], label: str) -> Any:
    """SGLang's draft ``TpModelWorker`` for the served algorithm (``label`` names
    it in SGLang's messages), with ``draft_runner`` and ``draft_runners``, what
    SGLang reads for runner discovery (weight updates, HiCache, disaggregation)."""
    target_config = target_worker.model_runner.model_config
    try:
        build = getattr(importlib.import_module(BUILDER[0]), BUILDER[1])
    except ImportError:
        build = None
    if build is not None:
        offered = dict(server_args=server_args, gpu_id=release_kwargs.get("gpu_id"),
                       nccl_port=release_kwargs.get("nccl_port"), target_model_config=target_config, algo_label=label)
        if "ps" in release_kwargs:  # 0.5.16-0.5.20: the draft never spans pipeline stages
            offered["ps"] = dataclasses.replace(release_kwargs["ps"], pp_rank=0)
        accepted = inspect.signature(build).parameters
        scope = getattr(importlib.import_module("sglang.srt.speculative.spec_utils"), "draft_pp_context", None)
        with scope() if scope is not None else contextlib.nullcontext():
            worker = build(**{k: v for k, v in offered.items() if k in accepted}).draft_worker
    else:
        worker = _draft_worker_before_builder(server_args, target_worker, release_kwargs)
    runner = worker.model_runner
    worker.draft_runner = runner
    worker.draft_runners = [runner]
    if getattr(runner.model_config, "vocab_size", None) is None:  # DFlash drafts have no vocabulary: the target's
        runner.model_config.vocab_size = target_config.vocab_size
    return worker


def _draft_worker_before_builder(server_args: Any, target_worker: Any, release_kwargs: Dict[str, Any]) -> Any:
    """0.5.14-0.5.15: a ``TpModelWorker(is_draft_worker=True)`` on a copy of the
    server arguments whose attention backend is the draft's, as DFLASH's worker
    builds it there (the global server arguments are set back afterwards)."""
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
    accepted = inspect.signature(TpModelWorker).parameters
    kwargs = {k: v for k, v in release_kwargs.items() if k in accepted}
    if "context_length" in accepted:  # 0.5.15
        kwargs["context_length"] = draft_args.context_length
    saved = get_global_server_args()
    try:
        return TpModelWorker(server_args=draft_args, pp_rank=0, is_draft_worker=True, **kwargs)
    finally:
        set_global_server_args_for_scheduler(saved)


def sglang_name(name: str, *modules: str) -> Any:
    """``name`` from the first of ``modules`` (where a release keeps it) that has it; ImportError otherwise."""
    for module in modules:
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    raise ImportError(f"this SGLang has no {name} (looked in {', '.join(modules)})")


@functools.lru_cache(maxsize=None)
def draft_model_worker_base() -> type:
    """A base class for a plugin's worker that has its own draft model (imports SGLang).

    It is :func:`~.worker_base.worker_base` plus, built in ``__init__``:
    ``draft_worker`` (SGLang's draft ``TpModelWorker``, see the module doc),
    ``draft_runner`` (its ``ModelRunner``: its ``model``, ``token_to_kv_pool``,
    ``forward``) and ``model_runner`` (the same runner, what SGLang reads up
    to 0.5.13); ``alloc_memory_pool``, ``init_attention_backends`` and
    ``init_cuda_graphs`` hand the scheduler's calls to the draft worker (its
    KV pool over the target's ``req_to_token_pool`` and allocator), and
    :meth:`forward_target` runs the target asking for hidden states the way
    the release takes the request. The plugin's ``AlgorithmSpec`` declares a
    :class:`~sglang_spec_plugins.draft_model.DraftModel`."""

    class DraftModelSpecWorker(worker_base()):
        def __init__(self, server_args, target_worker, **release_kwargs):
            super().__init__(server_args, target_worker, **release_kwargs)
            label = str(server_args.speculative_algorithm).upper()
            self.draft_worker = build_draft_worker(server_args, target_worker, release_kwargs, label)
            self.draft_runner = self.draft_worker.model_runner
            self.model_runner = self.draft_runner

        def alloc_memory_pool(self, memory_pool_config=None, req_to_token_pool=None, token_to_kv_pool_allocator=None):
            self.draft_worker.alloc_memory_pool(memory_pool_config=memory_pool_config,
                                                req_to_token_pool=req_to_token_pool,
                                                token_to_kv_pool_allocator=token_to_kv_pool_allocator)
            self.req_to_token_pool = req_to_token_pool
            self.token_to_kv_pool_allocator = token_to_kv_pool_allocator

        def init_attention_backends(self):
            self.draft_worker.init_attention_backends()

        def init_cuda_graphs(self):
            self.draft_worker.init_cuda_graphs()

        def forward_target(self, batch, capture_hidden_mode=None, **kwargs):
            """``target_worker.forward_batch_generation(batch, **kwargs)``, asking
            for ``capture_hidden_mode`` (a ``CaptureHiddenMode``) as a keyword
            (0.5.16+) or on the batch (0.5.14-0.5.15)."""
            forward = self.target_worker.forward_batch_generation
            if capture_hidden_mode is not None:
                if "capture_hidden_mode" in inspect.signature(forward).parameters:
                    kwargs["capture_hidden_mode"] = capture_hidden_mode
                else:
                    batch.capture_hidden_mode = capture_hidden_mode
            return forward(batch, **kwargs)

    return DraftModelSpecWorker
