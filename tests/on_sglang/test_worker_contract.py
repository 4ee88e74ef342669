"""The worker contract read off the installed release, against what its wheel
says (read by hand from each CI release's scheduler.py, base_spec_worker.py
and spec_registry.py) and against SGLang's own code run on it."""

import inspect
from types import SimpleNamespace

import pytest

from sglang_spec_plugins.engine.probe import probe
from sglang_spec_plugins.engine.worker_contract import (
    OVERLAP_FLAG,
    check_worker,
    contract,
    overlap_flag_needed,
)
from sglang_spec_plugins.worker import worker_base

RELEASE = probe().version
OLD_KWARGS = ("server_args", "gpu_id", "tp_rank", "moe_ep_rank", "nccl_port", "target_worker", "dp_rank",
              "attn_cp_rank", "moe_dp_rank")
ABSTRACT_UP_TO_0_5_15 = ("clear_cache_pool", "draft_worker", "target_worker")

# (constructor keywords, abstract members of BaseSpecWorker, non-overlap schema, forward keywords)
EXPECTED = {
    "0.5.12.post1": (OLD_KWARGS, ABSTRACT_UP_TO_0_5_15, "v1", ()),
    "0.5.13": (OLD_KWARGS, ABSTRACT_UP_TO_0_5_15, "v1", ("on_publish",)),
    "0.5.14": (OLD_KWARGS, ABSTRACT_UP_TO_0_5_15, "v2-sync", ("on_publish",)),
    "0.5.16": (("server_args", "gpu_id", "ps", "nccl_port", "target_worker"), (), "v2-sync", ("on_publish",)),
    "0.5.19": (("server_args", "gpu_id", "ps", "nccl_port", "target_worker"), (), "v2-sync",
               ("grammar_barrier", "on_publish", "pp_proxy_tensors")),
    "0.5.21": (("server_args", "gpu_id", "nccl_port", "target_worker"), (), "v2-sync",
               ("grammar_barrier", "on_publish", "pp_proxy_tensors")),
    "0.5.23": (("server_args", "gpu_id", "nccl_port", "target_worker"), (), "v2-sync",
               ("grammar_barrier", "on_publish", "pp_proxy_tensors")),
}


def test_contract_matches_the_wheel():
    found = contract()
    assert found.release == RELEASE
    assert found.base_class == "sglang.srt.speculative.base_spec_worker.BaseSpecWorker"
    assert {"forward_batch_generation", "clear_cache_pool"} <= set(found.required_members)
    if RELEASE not in EXPECTED:
        pytest.skip(f"no hand-read facts for {RELEASE}")
    kwargs, abstract, schema, forward = EXPECTED[RELEASE]
    assert (found.constructor_kwargs, found.base_abstract, found.non_overlap_schema, found.forward_keywords) == \
        (kwargs, abstract, schema, forward)


def test_overlap_probe_agrees_with_sglangs_create_worker():
    """The probe read off the source predicts what the release's own
    CustomSpecAlgo.create_worker does with supports_overlap=False."""
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    found = contract()
    assert found.overlap_refused  # every release 0.5.12-0.5.23
    sync = CustomSpecAlgo("KIT_SYNC", lambda server_args: int, supports_overlap=False)
    with pytest.raises(ValueError, match="does not support overlap scheduling"):
        sync.create_worker(SimpleNamespace(disable_overlap_schedule=False))
    assert sync.create_worker(SimpleNamespace(disable_overlap_schedule=True)) is int
    overlapping = CustomSpecAlgo("KIT_OVERLAP", lambda server_args: int, supports_overlap=True)
    assert overlapping.create_worker(SimpleNamespace(disable_overlap_schedule=False)) is int
    assert overlap_flag_needed(False, found) == OVERLAP_FLAG
    assert overlap_flag_needed(True, found) is None


def test_the_schema_probe_agrees_with_sglang():
    """Up to 0.5.13 a synchronous plugin algorithm runs the V1 worker path
    (supports_spec_v2 follows supports_overlap); later every one runs V2."""
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    sync = CustomSpecAlgo("KIT_SYNC", lambda server_args: int, supports_overlap=False)
    v1 = hasattr(sync, "supports_spec_v2") and not sync.supports_spec_v2()
    assert (contract().non_overlap_schema == "v1") == v1


class _Fits(worker_base()):
    def forward_batch_generation(self, batch, **kwargs):
        return batch


def test_worker_base_fits_and_instantiates_with_the_releases_keywords():
    found = contract()
    assert check_worker(_Fits, found) == []
    target = SimpleNamespace(model_runner=None)
    worker = _Fits(**{name: target if name == "target_worker" else None for name in found.constructor_kwargs})
    assert worker.target_worker is target and worker.draft_worker.draft_runner.token_to_kv_pool is None
    assert set(worker.release_kwargs) == set(found.constructor_kwargs) - {"server_args", "target_worker"}


def test_misfits_are_named():
    found = contract()

    class NoForward(worker_base()):
        pass

    class NarrowConstructor(_Fits):
        def __init__(self, server_args, target_worker):
            super().__init__(server_args, target_worker)

    class Plain:
        def __init__(self, **kwargs):
            pass

        def forward_batch_generation(self, batch):
            return batch

    assert check_worker(NoForward, found) == [
        f"NoForward defines no forward_batch_generation(self, batch, **kwargs), which the SGLang {RELEASE} "
        "scheduler calls on every step"]
    [narrow] = check_worker(NarrowConstructor, found)
    assert "cannot be called the way SGLang" in narrow and "gpu_id=..." in narrow
    problems = check_worker(Plain, found)
    assert any("Plain lacks" in p and "clear_cache_pool" in p and "worker_base()" in p for p in problems)
    if found.forward_keywords:
        assert any("Plain.forward_batch_generation" in p for p in problems)
    assert check_worker(lambda **kw: None, found)[0].startswith("the worker factory returned")
    assert inspect.isclass(worker_base())


def test_a_forward_without_a_signature_is_not_a_crash():
    """A callable whose signature cannot be read is not checked further; the check returns, never raises."""

    class Odd:
        __call__ = 3  # callable() says yes; inspect.signature cannot read it

    class OddForward(worker_base()):
        forward_batch_generation = Odd()

    assert check_worker(OddForward, contract()) == []


def _reference_row(table: str, release: str):
    """The cells of the row of docs/reference/worker-contract.md's ``table`` whose release range holds
    ``release``, each as a tuple of the names in it (``none``: empty) or, unquoted, its text."""
    from pathlib import Path

    from packaging.version import Version

    text = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "worker-contract.md").read_text()
    rows = text.split(f"<!-- {table}:start")[1].split(f"<!-- {table}:end -->")[0].strip().splitlines()[3:]
    for row in rows:
        span, *cells = [cell.strip() for cell in row.strip("|").split("|")]
        first, _, last = span.partition("-")
        if Version(first) <= Version(release) <= Version(last or first):
            return [tuple(n for n in cell.replace("`", "").split(", ") if n != "none") if "`" in cell or cell == "none"
                    else cell for cell in cells]
    raise AssertionError(f"docs/reference/worker-contract.md: no {table} row for {release}")


SCHEMA_TEXT = {"the V1 worker path": "v1", "the V2 schema, synchronously": "v2-sync"}


def test_the_reference_contract_table_matches_the_release():
    found = contract()
    kwargs, abstract, members, forward, schema = _reference_row("worker-contract-table", RELEASE)
    assert (kwargs, abstract, set(members), set(forward), SCHEMA_TEXT[schema]) == \
        (found.constructor_kwargs, found.base_abstract, set(found.scheduler_members), set(found.forward_keywords),
         found.non_overlap_schema)


def test_the_reference_draft_worker_table_matches_the_release():
    found = contract()
    members = {read.path.split(".", 1)[1] for read in found.required_reads if read.path.startswith("draft_worker.")}
    unchecked = {read.path.split(".", 1)[1] for read in found.worker_reads
                 if not read.optional and read.path.startswith("draft_worker.") and "draft_worker" not in read.checked}
    listed, listed_unchecked = _reference_row("draft-worker-table", RELEASE)
    assert (set(listed), set(listed) if listed_unchecked == "all" else set(listed_unchecked)) == (members, unchecked)


def test_sglang_s_own_draft_kv_pool_lookup_finds_none_on_a_worker_base_worker(sbd, monkeypatch):
    """Where the release looks the draft KV pool up under the speculative worker for every algorithm but NGRAM
    (``mem_cache.kv_cache_builder.get_draft_kv_pool`` 0.5.13-0.5.20, ``Scheduler._get_draft_kv_pool`` 0.5.12.x:
    disaggregation and HiCache then skip it), its own lookup finds None on a worker_base() worker, as on NGRAM's."""
    import importlib
    import importlib.util

    from sglang_spec_plugins.testing.cpu import absent_kernel_package
    from sglang_spec_plugins.testing.scheduler_start import KERNEL_PACKAGES

    for package, submodules in KERNEL_PACKAGES.items():  # the scheduler module imports them (never calls them here)
        if importlib.util.find_spec(package) is None:
            absent_kernel_package(monkeypatch, package, *submodules)
    from sglang.srt.managers.scheduler import Scheduler

    found = contract()
    worker = _Fits(**{name: SimpleNamespace(model_runner=None) if name == "target_worker" else None
                      for name in found.constructor_kwargs})
    algorithm, server_args = sbd(4), SimpleNamespace(enable_multi_layer_eagle=False)
    builder = "sglang.srt.mem_cache.kv_cache_builder"
    lookup = getattr(importlib.import_module(builder), "get_draft_kv_pool", None) if importlib.util.find_spec(builder) else None
    if lookup is not None:
        pool = lookup(draft_worker=worker, spec_algorithm=algorithm, server_args=server_args)
    elif hasattr(Scheduler, "_get_draft_kv_pool"):
        pool = Scheduler._get_draft_kv_pool(SimpleNamespace(draft_worker=worker, spec_algorithm=algorithm,
                                                            enable_overlap=False, server_args=server_args))
    else:
        pytest.skip(f"SGLang {RELEASE} reads the draft KV pool off draft_worker.draft_runners (none here), not draft_runner")
    assert (pool[0] if isinstance(pool, tuple) else pool) is None, pool


def test_reading_only_the_functions_that_name_what_is_read_gives_the_whole_files_contract(monkeypatch):
    """The reader parses only the functions of a file that name the worker
    (source_text.pruned_module); on this release that finds exactly what
    parsing every file whole finds, reads, lines and all."""
    import ast

    from sglang_spec_plugins.engine import worker_contract, worker_reads

    monkeypatch.setenv("SGLANG_SPEC_PLUGINS_CACHE", "off")
    worker_contract.contract.cache_clear()
    pruned = worker_contract.contract()
    whole = lambda path, pattern: ast.parse(path.read_text(encoding="utf-8"))  # noqa: E731
    monkeypatch.setattr(worker_contract, "pruned_module", whole)
    monkeypatch.setattr(worker_reads, "pruned_module", whole)
    worker_contract.contract.cache_clear()
    try:
        assert worker_contract.contract() == pruned
    finally:
        worker_contract.contract.cache_clear()
