"""Faults that used to show only once SGLang's ``Scheduler.__init__`` had
loaded the target's weights (issue 24 item 6), through the installed
release's real scheduler start (``sglang_spec_plugins.testing.scheduler_start``,
one process each): PROMPT_LOOKUP's n-gram settings beside widths by batch size
are now refused while SGLang resolves its arguments, before the scheduler
exists; a worker that gives ``StepWidths`` the model-free draft runner still
fails inside ``Scheduler.__init__`` (only the worker's constructor shows it),
but with a message naming the plugin, the mistake and the fix."""

import json
import os
import subprocess
import sys

import pytest
from importlib import metadata
from packaging.version import Version

WORKER = '''
from sglang_spec_plugins.worker import StepWidths, worker_base


class ModelFreeWidths(worker_base()):
    """Builds StepWidths on its own model_runner: worker_base()'s model-free draft runner."""

    def __init__(self, server_args, target_worker, **release_kwargs):
        super().__init__(server_args, target_worker, **release_kwargs)
        self.widths = StepWidths(self.model_runner)

    def forward_batch_generation(self, batch, **kwargs):
        raise AssertionError("no request is served here")
'''


def start(tmp_path, toml, algorithm, worker=None):
    (tmp_path / "start_faults.py").write_text(WORKER)
    (tmp_path / "plugins.toml").write_text(toml)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SPEC_PLUGINS") and k != "SGLANG_PLUGINS"}
    env.update(SGLANG_SPEC_PLUGINS_CONFIG=str(tmp_path / "plugins.toml"),
               PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    argv = [sys.executable, "-m", "sglang_spec_plugins.testing.scheduler_start", algorithm]
    argv += ["--worker", f"start_faults:{worker}"] if worker else []
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result (rc {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return json.loads(lines[-1]), run.stderr


def test_prompt_lookup_settings_beside_widths_by_batch_are_refused_before_the_scheduler(tmp_path):
    if Version(metadata.version("sglang")) < Version("0.5.14"):
        pytest.skip("PROMPT_LOOKUP's validator refuses SGLang before 0.5.14 (no V2 schema for plugin workers)")
    toml = ("[plugins]\nenable = ['prompt_lookup']\n[algorithms.PROMPT_LOOKUP]\nmax_tokens_per_req = 4\nmax_ngram = 1\n"
            "min_ngram = 2\nwidths_by_batch_size = {1 = 4, 8 = 2}\n")
    result, log = start(tmp_path, toml, "PROMPT_LOOKUP")
    assert not result["started"]
    assert result["error"].startswith(
        "PluginError: plugin 'prompt_lookup' (sglang-spec-example-prompt-lookup==0.1.0): algorithm PROMPT_LOOKUP: "
        "sgl_spec_verify_width(num_draft_tokens=4, is_draft_worker=False) raised ValueError: [algorithms.PROMPT_LOOKUP] "
        "min_ngram = 2 is above max_ngram = 1"), result
    assert not any(frame.startswith("managers/scheduler.py") for frame in result["frames"]), result["frames"]
    assert "Load weight" not in log and "weights loaded" not in log.lower()


def test_step_widths_on_the_model_free_runner_names_the_fix(tmp_path):
    if Version(metadata.version("sglang")) < Version("0.5.14"):
        pytest.skip("SBD's validator refuses SGLang before 0.5.14 (no V2 schema for plugin workers)")
    toml = "[plugins]\nenable = ['sbd']\n[algorithms.SBD]\nmax_tokens_per_req = 8\nverify_width = 4\n"
    result, _ = start(tmp_path, toml, "SBD", "ModelFreeWidths")
    assert not result["started"]
    assert result["error"] == (
        "PluginError: plugin 'sbd' (sglang-spec-example-sbd==0.1.0): algorithm SBD: StepWidths was given the worker's "
        "model-free draft runner (worker_base()'s model_runner, which runs no TARGET_VERIFY); give it the runner that "
        "verifies: StepWidths(self.target_worker.model_runner)"), result
    assert any(frame.startswith("managers/scheduler.py") for frame in result["frames"]), result["frames"]
