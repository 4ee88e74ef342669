"""The base class a plugin's worker is built on, fitted to the installed release.

:func:`worker_base` is SGLang's own ``BaseSpecWorker`` plus what every release
0.5.12-0.5.23 needs of a plugin worker; :class:`ModelFreeDraftWorker` and
:class:`ModelFreeRunner` answer what SGLang reads off the draft side of a
worker without a separate draft model, as SGLang answers for NGRAM.
Drafter authors import these from :mod:`sglang_spec_plugins.worker`.
"""

from __future__ import annotations

import functools

from .worker_contract import BASE_MODULE, BASE_NAME


class ModelFreeRunner:
    """What SGLang reads off a draft model runner, for a worker with none.

    SGLang reads ``spec_worker.draft_worker.draft_runner`` (and, up to 0.5.13,
    ``spec_worker.model_runner``) for every algorithm but NGRAM: the draft KV
    pool for disaggregation and HiCache (``token_to_kv_pool``; None: there is
    none, so both skip it as they do for NGRAM), its ``model_config`` (None,
    as NGRAM's), the device timer the metrics reporter sets, and the weight
    exporter a ``save_remote_model`` with a ``draft_url`` calls (nothing of its
    own to save). ``server_args`` are its worker's (for messages).
    """

    token_to_kv_pool = None
    model_config = None

    def __init__(self, server_args=None):
        self.server_args = server_args

    @property
    def weight_exporter(self) -> "ModelFreeRunner":
        return self

    def save_remote_model(self, url: str) -> None:
        """No draft weights: nothing to save."""


class ModelFreeDraftWorker:
    """What SGLang reads off ``spec_worker.draft_worker``, for a worker
    without a separate draft model, answering what SGLang answers for NGRAM
    (whose ``draft_worker`` is None, a case SGLang skips only for NGRAM):
    no draft runners (weight updates reach the target alone, the HiCache
    draft plan and draft KV pool are empty), no graph memory or time (None),
    no weight-load time or preloaded bytes (0), and nothing to allocate,
    initialise or capture.
    """

    draft_runners = ()
    graph_memory_usage = None
    graph_time_usage = None
    weight_load_time = 0.0
    preloaded_weights_bytes = 0

    def __init__(self, server_args=None):
        self.draft_runner = ModelFreeRunner(server_args)

    def alloc_memory_pool(self, **pools) -> None:
        """The worker uses the target's pools; nothing of its own."""

    def init_attention_backends(self) -> None:
        """No draft model: no attention backend."""

    def init_cuda_graphs(self, **options) -> None:
        """No draft model: no graphs."""


@functools.lru_cache(maxsize=None)
def worker_base() -> type:
    """A base class for a plugin's worker on the installed release (imports SGLang).

    It is SGLang's own ``BaseSpecWorker`` (every default the scheduler relies
    on: memory pools, attention backends, CUDA graphs, weight updates, ...)
    with what a plugin worker needs on every release 0.5.12-0.5.23: a
    constructor taking the keywords this release passes (``server_args`` and
    ``target_worker`` kept as attributes, the rest, which vary by release, in
    ``release_kwargs``); ``target_worker`` and ``clear_cache_pool``, which the
    base leaves abstract up to 0.5.15; and what SGLang reads off a worker
    without a separate draft model, as SGLang's own model-free NGRAM worker
    answers it: ``draft_worker`` (a :class:`ModelFreeDraftWorker`: SGLang
    reads ``draft_worker.draft_runner.token_to_kv_pool`` of every algorithm
    but NGRAM, so None would crash its start-up), ``model_runner`` (that
    view's :class:`ModelFreeRunner`, read up to 0.5.13 for the draft KV pool;
    the target's runner is ``self.target_worker.model_runner``),
    ``model_config`` (None) and weight updates (from tensors: the target
    worker's, as NGRAM does; from disk/IPC: the scheduler has updated the
    target, there is nothing else). ``draft_worker`` and ``model_runner`` are
    made on first read and may be assigned in ``__init__`` by a worker that
    has its own. A subclass supplies ``forward_batch_generation(self, batch, **kwargs)``.
    """
    import importlib

    base = getattr(importlib.import_module(BASE_MODULE), BASE_NAME)

    class PluginSpecWorker(base):
        model_config = None
        verifies_one_width = False  # its steps take their widths from StepWidths.at (see verifies_one_width())

        def __init__(self, server_args, target_worker, **release_kwargs):
            super().__init__()
            self.server_args = server_args
            self._target_worker = target_worker
            self.release_kwargs = release_kwargs

        @property
        def target_worker(self):
            return self._target_worker

        @functools.cached_property
        def draft_worker(self):
            return ModelFreeDraftWorker(self.server_args)

        @functools.cached_property
        def model_runner(self):
            return self.draft_worker.draft_runner

        def clear_cache_pool(self):
            """Nothing of its own to clear: the KV pools are the target worker's."""

        def update_weights_from_tensor(self, recv_req):
            """SGLang hands tensor updates to the speculative worker alone: the target's."""
            return self.target_worker.update_weights_from_tensor(recv_req)

    for name in ("update_weights_from_disk", "update_weights_from_ipc"):
        if not hasattr(base, name):  # up to 0.5.15; later the base updates draft_worker.draft_runners (none)
            setattr(PluginSpecWorker, name, _target_only_update)
    return PluginSpecWorker


def verifies_one_width(worker_cls: object) -> bool:
    """Whether the worker class verifies one width at every step on each worker (the largest the
    algorithm resolves there), which its base says with ``verifies_one_width = True``
    (:func:`~sglang_spec_plugins.worker.draft_block_worker_base`): widths by batch size that give
    several widths are not served by it (the start-up check refuses them)."""
    return getattr(worker_cls, "verifies_one_width", False) is True


def _target_only_update(worker, recv_req):
    """The scheduler has updated the target worker already; no draft weights."""
    return True, "Succeeded to update model weights."
