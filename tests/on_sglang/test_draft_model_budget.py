"""The draft KV pool of a draft-model plugin is counted in the target's KV budget, as SGLang
counts DFLASH's: the KV bytes per token each of SGLang's pool configurators budgets the
memory with (``testing.scheduler_start``'s ``kv_bytes_per_token``), for SGLang's own DFLASH
and for the DFLASH_BLOCK example on the same one-layer draft, against a model-free plugin
(PROMPT_LOOKUP) on the same target, which has no draft pool.

Checked by hand (0.5.23): without the loader's ``draft_model.DefaultPoolConfigurator.__init__``
and ``draft_model._dflash_draft_cell_size`` patches, DFLASH_BLOCK's figure fell to the
model-free plugin's (256 bytes against DFLASH's 384), and this test failed.
"""

import json
import os
import subprocess
import sys

import pytest

from sglang_spec_plugins.engine.worker_contract import contract
from sglang_spec_plugins.testing.draft_checkpoint import dflash_draft
from sglang_spec_plugins.testing.scheduler_start import TINY_LLAMA

pytestmark = pytest.mark.skipif(
    contract().non_overlap_schema != "v2-sync",
    reason=f"draft-model plugins need SGLang 0.5.14+ (the V2 speculative schema); SGLang {contract().release} runs "
           f"synchronous plugin workers on {contract().non_overlap_schema!r}")


def _start(tmp_path, algorithm, draft=None, overlap="off", started=True):
    config = tmp_path / f"{algorithm}.toml"
    config.write_text('[plugins]\nenable = ["dflash_block", "prompt_lookup"]\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), SGLANG_SPEC_PLUGINS_CONFIG=str(config))
    env.pop("SGLANG_SPEC_PLUGINS", None)
    command = [sys.executable, "-m", "sglang_spec_plugins.testing.scheduler_start", algorithm, "--ndt", "4",
               *(["--draft", str(draft)] if draft else []), "--overlap", overlap]  # off: 0.5.14 serves DFLASH_BLOCK synchronously only
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result (rc {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    result = json.loads(lines[-1])
    assert result["started"] is started, result
    return result


def test_the_draft_pool_is_counted_in_the_targets_kv_budget_as_for_native_dflash(tmp_path):
    draft = dflash_draft(tmp_path / "draft", TINY_LLAMA, block_size=4, mask_token_id=255, target_layer_ids=[0])
    native = _start(tmp_path, "DFLASH", draft)["kv_bytes_per_token"]
    block = _start(tmp_path, "DFLASH_BLOCK", draft)["kv_bytes_per_token"]
    model_free = _start(tmp_path, "PROMPT_LOOKUP")["kv_bytes_per_token"]
    if not native:
        pytest.skip(f"SGLang {contract().release} has no pool configurator to read the budget off")
    print(f"KV bytes per token, SGLang {contract().release}: native DFLASH {native}, DFLASH_BLOCK {block}, "
          f"PROMPT_LOOKUP {model_free}")
    assert block[0] == native[0] > model_free[0], (native, block, model_free)  # the target's configurator


def test_a_release_whose_overlap_scheduler_decides_for_dflash_alone_refuses_the_block_drafter_overlapped(tmp_path):
    """0.5.14's overlap ``FutureMap`` branches on DFLASH (refused sites with the ``overlap`` condition): the
    start-up check refuses DFLASH_BLOCK with overlap on, naming each site and the flag that serves it."""
    from sglang_spec_plugins.serving.draft_model_check import refused_sites

    sites = [site for site, judged in refused_sites() if judged.need == "overlap"]
    if not sites:
        pytest.skip(f"SGLang {contract().release} has no overlap-only DFLASH site; "
                    "test_request_kinds_serve.py serves DFLASH_BLOCK overlapped")
    draft = dflash_draft(tmp_path / "draft", TINY_LLAMA, block_size=4, mask_token_id=255, target_layer_ids=[0])
    error = _start(tmp_path, "DFLASH_BLOCK", draft, overlap="on", started=False)["error"]
    assert "start SGLang with --disable-overlap-schedule" in error, error
    assert error.count("not served when the worker runs under the overlap scheduler") == 1, error
    for site in sites:
        assert site.where in error, (site.where, error)
