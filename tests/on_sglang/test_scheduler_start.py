"""SGLang's real ``Scheduler.__init__`` runs, on a CPU, with a plugin
algorithm whose worker is built on ``worker_base()``.

Each start is one process of ``sglang_spec_plugins.testing.scheduler_start``
(the whole ``__init__`` of the installed release: the real ``TpModelWorker``
on a two-layer random Llama with torch.distributed over gloo and its real KV
pools, ``create_worker`` and the plugin's worker, both workers' memory pools,
attention backends and graphs, the KV-cache builder, HiCache draft
registration, ``init_disaggregation``, the weight updater, metrics and the
rest; nothing of ``__init__`` is skipped, though with CUDA graphs off, as a
CPU has no CUDA, its graph-capture steps capture nothing). Stand-in: only the GPU kernel
package ``vllm._custom_ops``, imported (never called) by the rotary embedding.

The crash class of issue 14: SGLang 0.5.12-0.5.20 read
``spec_worker.draft_worker.draft_runner.token_to_kv_pool`` for every
algorithm but NGRAM; a worker whose ``draft_worker`` is None (what
``worker_base()`` gave before) crashes the start there, and ``check_worker``
must say so before a server is started.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from dists import make_dist
from sglang_spec_plugins.engine.worker_contract import check_worker, contract

WORKERS = '''
from sglang_spec_plugins.worker import worker_base


class Fits(worker_base()):
    def forward_batch_generation(self, batch, **kwargs):
        raise AssertionError("no request is served here")


class NoDraftWorker(Fits):
    """draft_worker None, as SGLang's NGRAM worker and worker_base() before issue 14."""

    draft_worker = None
'''

CARRIER = '''
from sglang_spec_plugins import AlgorithmSpec, hookimpl


def _worker(server_args):
    from start_workers import Fits

    return Fits


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="CARRIER", worker_factory=_worker, supports_overlap=False)]


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, settings):
    return settings.get("verify_width", num_draft_tokens) if algorithm == "CARRIER" else None
'''
"""An installed plugin whose algorithm carries the worker under test on every release (the examples
drive the V2 schema, 0.5.14+, and refuse earlier releases)."""

TOML = '[plugins]\nenable = ["start_carrier"]\n[algorithms.CARRIER]\nmax_tokens_per_req = 8\nverify_width = 4\n'


@pytest.fixture
def workers(tmp_path, monkeypatch):
    (tmp_path / "start_workers.py").write_text(WORKERS)
    make_dist(tmp_path, "start-carrier", {"start_carrier": "start_carrier"}, {"start_carrier": CARRIER})
    (tmp_path / "plugins.toml").write_text(TOML)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _start(folder, worker):
    if importlib.util.find_spec("setproctitle") is None:  # SGLang's scheduler imports it at its top
        pytest.fail("setproctitle is not installed: pip install -r tests/requirements-sglang-cpu.txt")
    env = dict(os.environ, SGLANG_SPEC_PLUGINS_CONFIG=str(folder / "plugins.toml"),
               PYTHONPATH=os.pathsep.join([str(folder), *sys.path]))
    env.pop("SGLANG_SPEC_PLUGINS", None)
    run = subprocess.run([sys.executable, "-m", "sglang_spec_plugins.testing.scheduler_start", "CARRIER",
                          "--worker", f"start_workers:{worker}"],
                         env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result (rc {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return json.loads(lines[-1])


def test_the_real_scheduler_starts_with_a_worker_base_worker(workers):
    result = _start(workers, "Fits")
    assert result["started"], result
    assert result["target_worker"] == "TpModelWorker"
    assert result["spec_worker"] == "start_workers.Fits" and result["model_worker_is_spec_worker"]
    assert result["max_total_num_tokens"] > 0


def test_a_none_draft_worker_crashes_where_check_worker_says(workers):
    """Where the release reads under ``draft_worker`` without checking it for
    None, the start crashes there and check_worker names the read; where it
    does not (0.5.21+ check it), the start succeeds."""
    import start_workers

    result = _start(workers, "NoDraftWorker")
    problems = [p for p in check_worker(start_workers.NoDraftWorker, contract()) if "draft_worker is None" in p]
    if not result["started"]:
        assert "draft_runner" in result["error"], result
        assert problems, f"the start crashed ({result}) but check_worker saw nothing"
        crash_files = {frame.split(":")[0] for frame in result["frames"]}
        assert any(f"({path}:" in problems[0] for path in crash_files), (problems, result["frames"])
    assert result["started"] or problems
