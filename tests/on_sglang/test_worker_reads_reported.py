"""A worker that does not answer what the installed release reads off a
speculative worker is named, with the member, the SGLang file that reads it
and the release: by ``check_worker``, by the conformance kit's
``sglang_worker`` check and by ``sglang-spec-plugins check``, each run as a
user runs it (the kit in an inner pytest session, the CLI in a subprocess, on a
plugin installed as a real distribution)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dists import PLUGIN_HEADER, make_dist
from sglang_spec_plugins.engine.probe import probe
from sglang_spec_plugins.worker import check_worker, contract, worker_base

RELEASE = probe().version

NONE_CRASH = {
    "0.5.12.post1": "draft_worker.draft_runner (managers/scheduler.py:997)",
    "0.5.13": "draft_worker.draft_runner (mem_cache/kv_cache_builder.py:63)",
    "0.5.14": "draft_worker.draft_runner (mem_cache/kv_cache_builder.py:61)",
    "0.5.16": "draft_worker.draft_runner (mem_cache/kv_cache_builder.py:69)",
    "0.5.19": "draft_worker.draft_runners (speculative/base_spec_worker.py:307)",
    "0.5.21": None,
    "0.5.23": None,
}
"""The first read under a None ``draft_worker`` that each CI release makes
unchecked (read by hand from the wheels: the draft KV pool lookup,
``Scheduler._get_draft_kv_pool`` up to 0.5.12 and
``kv_cache_builder.get_draft_kv_pool`` 0.5.13-0.5.17, which 0.5.19 checks for
None; 0.5.19's ``BaseSpecWorker.update_weights_from_disk`` does not; 0.5.21+
check everywhere)."""


VIEW_PLUGIN = PLUGIN_HEADER + '''
from types import SimpleNamespace


def factory(server_args):
    from sglang_spec_plugins.worker import worker_base

    class Worker(worker_base()):
        draft_worker = SimpleNamespace()  # a draft-worker view that answers nothing

        def forward_batch_generation(self, batch, **kwargs):
            return None

    return Worker


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="BADVIEW", worker_factory=factory, supports_overlap=True)]
'''


class _Fits(worker_base()):
    def forward_batch_generation(self, batch, **kwargs):
        return None


class NoDraftWorker(_Fits):
    draft_worker = None


class InitNone(_Fits):
    def __init__(self, server_args, target_worker, **kwargs):
        super().__init__(server_args, target_worker, **kwargs)
        self._draft_worker = None

    @property
    def draft_worker(self):
        return self._draft_worker


def test_a_none_draft_worker_is_named_where_sglang_reads_under_it():
    expected = NONE_CRASH.get(RELEASE, "unknown")
    if expected == "unknown":
        pytest.skip(f"no hand-read expectation for {RELEASE}")
    for cls in (NoDraftWorker, InitNone):  # a class attribute, and a None set by the constructor
        problems = [p for p in check_worker(cls, contract()) if "draft_worker is None" in p]
        if expected is None:
            assert problems == [], problems
            continue
        path, where = expected.split()
        assert problems == [
            f"{cls.__name__}.draft_worker is None, but SGLang {RELEASE} reads {path} off every speculative worker "
            f"but NGRAM {where}; build on sglang_spec_plugins.worker.worker_base(), whose "
            "draft_worker answers it for a worker without a draft model"]


def test_a_missing_member_is_named_with_its_file():
    """``model_runner`` is read off every speculative worker (``save_remote_model``
    with a ``draft_url``, and the draft KV pool up to 0.5.13); BaseSpecWorker has none."""
    found = contract()
    read = next(r for r in found.required_reads if r.path == "model_runner")

    class Bare:
        def __init__(self, **kwargs):
            pass

        def forward_batch_generation(self, batch, **kwargs):
            return None

    [lacks] = [p for p in check_worker(Bare, found) if p.startswith("Bare lacks")]
    assert f"model_runner ({read.where})" in lacks and f"which SGLang {RELEASE} uses" in lacks, lacks


def _site(tmp_path):
    site = tmp_path / "site"
    make_dist(site, "broken-badview", {"badview": "badview_plugin"}, {"badview_plugin": VIEW_PLUGIN})
    (tmp_path / "plugins.toml").write_text('[plugins]\nenable = ["badview"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SPEC_PLUGINS")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *sys.path])
    return env


def _says_the_view_lacks_a_read(output):
    flat = " ".join(output.split())
    assert "algorithm BADVIEW" in flat and "Worker.draft_worker (SimpleNamespace) has no " in flat, output
    assert f"but SGLang {RELEASE} reads draft_worker." in flat and "off every speculative worker but NGRAM (" in flat, output


def test_the_kit_names_the_member(kit):
    kit.install("badview", VIEW_PLUGIN)
    result = kit.run("badview", select="sglang_worker")
    result.assert_outcomes(failed=1, deselected=8)
    _says_the_view_lacks_a_read(result.stdout.str())


def test_check_names_the_member(tmp_path):
    env = _site(tmp_path)
    exe = Path(sys.executable).with_name("sglang-spec-plugins")
    out = subprocess.run([str(exe), "check", str(tmp_path / "plugins.toml"), "-n", "4", "--single-process"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stdout + out.stderr
    _says_the_view_lacks_a_read(out.stderr)
