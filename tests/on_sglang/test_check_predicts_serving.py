"""What ``check`` says each worker verifies is what SGLang's real scheduler serves (issue 45 item 3).

For every example drafter with each width setting it accepts, ``sglang-spec-plugins check --json -n 4``
(in this process) resolves the widths, and the same plugins.toml is served through the release's real
``Scheduler`` on a CPU (``testing.scheduler_serve``, one process per run) while the batch grows and shrinks
(three requests of 16, 12 and 6 tokens, the last joining after two verify steps: batches of 2, 3, 2, 1).
Every TARGET_VERIFY batch the target ran, and the draft runner of a worker with a draft model, must be at a
width check said a step of its batch size verifies: exactly that width where check names one (one width, or
each bucket's largest where nobody chooses), one of its bucket's where the acceptance controller chooses, one
of the declared widths where the worker picks its own. Settings combine where they can (one-width buckets
beside buckets the controller chooses in; buckets nobody chooses in beside one-width buckets), so that 8
runs cover: PROMPT_LOOKUP at one width and with the controller, CONTROLLED_ACCEPTANCE with nobody choosing
and with its own width cycle, SBD picking its widths and at one width, DFLASH_BLOCK verifying part of its
block and all of it. Settings the workers would not serve are refused by check and by the start-up check
alike (``bad_inputs.py``).

Before check said who chooses, it predicted the bucket's largest for the controller's, SBD's and the width
cycle's steps, and this test failed on those three runs.
"""

import importlib.util
import json
from dataclasses import dataclass

import pytest

from bad_inputs import CONTINUATIONS
from sglang_spec_plugins.engine.worker_contract import contract
from sglang_spec_plugins.testing.scheduler_serve import serve_in_a_process
from sglang_spec_plugins.widths_by_batch_size import WidthsByBatchSize

NDT = 4
LENGTHS = (16, 12, 6)
"""``repetitive``, ``mixed``, ``random`` (sent after two verify steps): batches of 2, 3, 2 and 1."""

# slow: the main run (0.5.23) runs it; on every release the predictions themselves (test_cli's
# test_check_says_who_chooses_a_steps_width_among_its_buckets, test_policy's chosen_by tests), the widths the
# runners read (test_width_reaches_runner) and the refusals (bad_inputs.py) run
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    contract().non_overlap_schema != "v2-sync",
    reason=f"the examples drive SGLang's V2 schema (0.5.14+); SGLang {contract().release} runs synchronous plugin "
           f"workers on {contract().non_overlap_schema!r}")]


@dataclass(frozen=True)
class Run:
    algorithm: str
    plugin: str
    table: str
    """The algorithm's plugins.toml table, after its header."""


RUNS = {
    "prompt lookup at one width": Run("PROMPT_LOOKUP", "prompt_lookup", "verify_width = 3\n"),
    "prompt lookup, the controller choosing": Run(
        "PROMPT_LOOKUP", "prompt_lookup", "widths_by_batch_size = {1 = 4, 2 = [2, 3], 3 = [1, 2]}\n"
        "widths_by_acceptance = {warmup_steps = 1, interval_steps = 1}\n"),
    "controlled acceptance, nobody choosing": Run(
        "CONTROLLED_ACCEPTANCE", "controlled_acceptance",
        f"continuations = '{CONTINUATIONS}'\nwidths_by_batch_size = {{1 = [2, 4], 3 = 3}}\n"),
    "controlled acceptance, its width cycle": Run(
        "CONTROLLED_ACCEPTANCE", "controlled_acceptance",
        f"continuations = '{CONTINUATIONS}'\nwidths_by_batch_size = {{1 = [2, 4]}}\nwidth_cycle = [2, 4]\n"),
    "sbd picking its widths": Run("SBD", "sbd", "widths_by_batch_size = {1 = [2, 4], 3 = 4}\n"),
    "sbd at one width": Run("SBD", "sbd", "verify_width = 3\n"),
    "dflash block verifying part of it": Run("DFLASH_BLOCK", "dflash_block", "verify_width = 2\n"),
    "dflash block verifying all of it": Run("DFLASH_BLOCK", "dflash_block", ""),
}


@pytest.fixture(scope="module")
def draft(tmp_path_factory):
    """A DFlash-layout draft of the tiny Llama the harness serves (random weights), blocks of ``NDT``."""
    from sglang_spec_plugins.testing.draft_checkpoint import dflash_draft
    from sglang_spec_plugins.testing.scheduler_start import TINY_LLAMA

    return dflash_draft(tmp_path_factory.mktemp("draft") / "draft", TINY_LLAMA, block_size=NDT, mask_token_id=255,
                        target_layer_ids=[0])


def predicted(row, worker, batch_size):
    """The widths check says a step of ``batch_size`` verifies on ``worker`` (``"target"`` or ``"draft"``):
    one where nobody chooses."""
    plain = row.get(f"{worker}_widths_by_batch_size")
    if plain is None:
        return {row[worker]}
    buckets = WidthsByBatchSize.parse(plain)
    chosen_by = row.get(f"{worker}_chosen_by")
    if chosen_by in (None, "nobody"):
        return {buckets.at(batch_size)}
    if chosen_by == "acceptance controller":
        return set(buckets.widths_at(batch_size))
    assert chosen_by == "worker", row
    return set(buckets.candidates)


@pytest.mark.parametrize("name", list(RUNS))
def test_every_verify_batch_is_at_a_width_check_predicts(name, cli, tmp_path, draft, monkeypatch):
    run = RUNS[name]
    module = {"prompt_lookup": "prompt_lookup_drafter", "controlled_acceptance": "controlled_acceptance_drafter",
              "sbd": "sbd_drafter", "dflash_block": "dflash_block_drafter"}[run.plugin]
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"the example is not installed: pip install -e examples/{module}")
    config = tmp_path / "plugins.toml"
    config.write_text(f"[plugins]\nenable = ['{run.plugin}']\n[algorithms.{run.algorithm}]\n{run.table}")
    drafting = run.algorithm == "DFLASH_BLOCK"
    monkeypatch.delenv("SGLANG_SPEC_PLUGINS_AGREEMENT", raising=False)
    status, out, err = cli("check", config, "-n", NDT, "--single-process", "--disable-overlap-schedule",
                           "--attention-backend", "triton", "--json",
                           *(("--speculative-draft-model-path", draft) if drafting else ()))
    report = json.loads(out)
    assert status == 0 and report["ok"], report["problems"]
    row = report["algorithms"][run.algorithm]["widths"][str(NDT)]

    served = serve_in_a_process(run.algorithm, config, ndt=NDT, max_new_tokens=LENGTHS, late_after=2,
                                draft=draft if drafting else None, timeout=600)
    assert served["served"], served
    workers = {"target": served["verify_steps"], "draft": served["draft_verify_steps"]}
    assert workers["target"] and (bool(workers["draft"]) == ("draft" in row)), (workers, row)
    sizes = [size for size, _ in workers["target"]]
    assert any(b > a for a, b in zip(sizes, sizes[1:])) and any(b < a for a, b in zip(sizes, sizes[1:])), sizes
    for worker, steps in workers.items():
        for size, width in steps:
            widths = predicted(row, worker, size)
            assert width in widths, (worker, size, width, widths, row, steps)
        print(f"{name}: {worker} verify steps [batch size, width] on SGLang {contract().release}: {steps}")
