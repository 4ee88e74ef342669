"""``worker_base()`` answers what the installed release reads off a
speculative worker without a draft model, as SGLang answers it for its own
model-free NGRAM worker: every path the probe finds resolves on an instance,
the base class's own defaults give what they give when ``draft_worker`` is
None (NGRAM), and SGLang's draft-KV-pool lookup finds no pool."""

from types import SimpleNamespace

import pytest

from sglang_spec_plugins.worker import ModelFreeDraftWorker, check_worker, contract, worker_base

NONE_DEFAULTS = ("graph_memory_usage", "graph_time_usage", "weight_load_time", "preloaded_weights_bytes",
                 "primary_draft_kv_pool")
"""Base-class properties (0.5.17+) whose value for a worker without a draft
model is what the base computes with ``draft_worker`` None."""


class Worker(worker_base()):
    def forward_batch_generation(self, batch, **kwargs):
        raise AssertionError("not driven here")


class NgramLike(Worker):
    """The same worker with ``draft_worker`` None, as SGLang's NGRAM worker has it."""

    draft_worker = None


def _target(sbd):
    updates = []
    runner = SimpleNamespace(spec_algorithm=sbd, attn_backend=object(),
                             prewarm_sampling=lambda: "prewarmed")
    target = SimpleNamespace(model_runner=runner, updates=updates,
                             update_weights_from_tensor=lambda req: updates.append(req) or (True, "target"))
    return target


def _make(cls, target):
    return cls(**{name: target if name == "target_worker" else None for name in contract().constructor_kwargs})


def test_every_path_sglang_reads_resolves(sbd):
    found = contract()
    target = _target(sbd(4))
    worker = _make(Worker, target)
    assert found.required_reads, "the probe found no read: it is broken"
    for read in found.required_reads:
        value = worker
        for name in read.path.split("."):
            if "[" in name or value is target.model_runner:  # the target's own runner: not the worker's to answer
                break
            assert hasattr(value, name), f"{read.path} ({read.where}) does not resolve on worker_base()"
            value = getattr(value, name)
    assert check_worker(Worker, found) == []


def test_base_defaults_answer_as_for_no_draft_worker(sbd):
    target = _target(sbd(4))
    worker, ngram = _make(Worker, target), _make(NgramLike, target)
    compared = [name for name in NONE_DEFAULTS if hasattr(type(worker), name)]
    for name in compared:
        assert getattr(worker, name) == getattr(ngram, name), name
    if hasattr(worker, "weight_update_runners"):
        assert worker.weight_update_runners() == [] == ngram.weight_update_runners()
    if hasattr(worker, "_draft_model_runners"):  # what the HiCache draft plan and the draft KV pool start from
        assert tuple(worker._draft_model_runners()) == ()
    for name in ("alloc_memory_pool", "init_attention_backends", "init_cuda_graphs"):  # 0.5.14+: the scheduler calls them
        if hasattr(worker, name):
            getattr(worker, name)()


def test_weight_updates_reach_the_target_only(sbd):
    target = _target(sbd(4))
    worker = _make(Worker, target)
    request = SimpleNamespace(model_path="m", load_format=None, recapture_cuda_graph=False)
    assert worker.update_weights_from_tensor(request) == (True, "target") and target.updates == [request]
    for name in ("update_weights_from_disk", "update_weights_from_ipc"):
        if hasattr(worker, name):
            assert getattr(worker, name)(request)[0] is True
    worker.model_runner.weight_exporter.save_remote_model("url")  # no draft weights: nothing saved


def test_sglangs_draft_kv_pool_lookup_finds_none(sbd):
    """SGLang's own lookup (0.5.13-0.5.17 and 0.5.19-0.5.20: ``kv_cache_builder.get_draft_kv_pool``,
    the function that crashed on 0.5.16 with ``draft_worker`` None) returns None
    for the plugin worker, as it does for NGRAM."""
    builder = pytest.importorskip("sglang.srt.mem_cache.kv_cache_builder")
    if not hasattr(builder, "get_draft_kv_pool"):
        pytest.skip("no get_draft_kv_pool here: 0.5.12 looks the pool up in Scheduler, 0.5.18 and 0.5.21+ in "
                    "primary_draft_kv_pool (compared above)")
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algorithm = sbd(4)
    worker = _make(Worker, _target(algorithm))
    server_args = SimpleNamespace(enable_multi_layer_eagle=False)
    for_ngram = builder.get_draft_kv_pool(draft_worker=worker, spec_algorithm=SpeculativeAlgorithm.NGRAM,
                                          server_args=server_args)
    assert for_ngram in (None, (None, None))  # (pool, model config) up to 0.5.15
    assert builder.get_draft_kv_pool(draft_worker=worker, spec_algorithm=algorithm, server_args=server_args) == for_ngram


def test_the_view_is_per_worker_and_replaceable(sbd):
    target = _target(sbd(4))
    one, two = _make(Worker, target), _make(Worker, target)
    assert isinstance(one.draft_worker, ModelFreeDraftWorker) and one.draft_worker is not two.draft_worker
    assert one.model_runner is one.draft_worker.draft_runner
    one.draft_worker = "own"  # a worker with its own draft model assigns it
    assert one.draft_worker == "own"


def test_a_chain_worker_without_a_drafter_is_refused_when_built_naming_it(sbd):
    """``chain_worker_base()`` verifies what ``drafts`` gives: a subclass without one is refused at
    construction (before its first step), naming the plugin, the algorithm and the class."""
    from sglang_spec_plugins.errors import PluginError
    from sglang_spec_plugins.worker import chain_worker_base

    class NoDrafter(chain_worker_base()):
        pass

    target = _target(sbd(4))
    args = SimpleNamespace(speculative_algorithm="SBD")
    kwargs = {name: target if name == "target_worker" else None for name in contract().constructor_kwargs}
    with pytest.raises(PluginError, match=r"plugin 'sbd'.*algorithm SBD: .*NoDrafter is built on chain_worker_base\(\) "
                                          r"but defines no drafts\(req, tokens, count\)"):
        NoDrafter(**dict(kwargs, server_args=args))
