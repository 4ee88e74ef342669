"""A drafter's fault while serving never takes the server down nor changes a token, through SGLang's real scheduler.

Each run serves the three greedy requests of ``testing.scheduler_serve`` (32
tokens each) with the overlap scheduler on, as a server runs by default (where
the release drives a speculative worker under it on a CPU: 0.5.23), with a
worker that faults at chosen decode steps (``drafters.Faulty``: its ``drafts``
raises or calls ``sys.exit`` for one request, returns one token too many or
an id past the vocabulary; its ``step_width`` returns 0, -1 or 2.0 or asks
``StepWidths.at`` for an undeclared width; a step sleeps past the slow-step
bound; its ``refusal`` raises at the prefill; ``drafters.FaultyBlock``: the
block drafter's ``drafts`` raises or returns the wrong shape, dtype or token
range). The server must serve every request, token for token as plain
decoding, and log each faulted step once, naming the plugin, its
distribution, the hook and (where it concerns one) the request; past
``max_faulted_steps`` the drafter is switched off and the rest is served plainly.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from sglang_spec_plugins.engine.worker_contract import contract
from sglang_spec_plugins.testing.draft_checkpoint import accepting_draft, llama_target, read_weights
from sglang_spec_plugins.testing.scheduler_serve import overlap_on_a_cpu, serve_in_a_process
from sglang_spec_plugins.testing.scheduler_start import TINY_LLAMA

pytestmark = pytest.mark.skipif(
    not contract().overlap_schema,
    reason=f"the worker bases drive SGLang's V2 schema (0.5.14+); SGLang {contract().release} has none")

OVERLAP = overlap_on_a_cpu()  # the overlap scheduler as a server runs it, where the release runs it on a CPU (0.5.23)
PLUGIN = "plugin 'prompt_lookup' (sglang-spec-example-prompt-lookup==0.1.0): algorithm PROMPT_LOOKUP: "
CHAIN_FAULTS = {1: "slow", 2: "raise", 3: "exit", 4: "too_many", 5: "out_of_vocabulary", 6: "width_zero",
                7: "width_negative", 8: "width_float", 9: "undeclared_width"}
"""Per-request faults first, while every request still decodes; then the step's width, which every request waits for."""
EXPECTED = {
    2: "drafts(req, tokens, count) for request 'repetitive' raised RuntimeError: a drafter bug",
    3: "drafts(req, tokens, count) for request 'repetitive' raised SystemExit: 3",
    4: "drafts(req, tokens, count) for request 'repetitive' returned 4 tokens, not 3",
    5: "drafts(req, tokens, count) for request 'repetitive' returned 1000000, not a token id in [0, 256)",
    6: "step_width(batch) returned 0, not one of the declared widths 4",
    7: "step_width(batch) returned -1, not one of the declared widths 4",
    8: "step_width(batch) returned 2.0, not one of the declared widths 4",
    9: "step_width(batch) raised PluginError: StepWidths.at(",  # the step's batch size
}
NEW_TOKENS = 32
"""Long enough that every faulted step runs before the batch has finished."""


def _toml(faults, limit=None, algorithm="PROMPT_LOOKUP", plugin="prompt_lookup"):
    table = "{" + ", ".join(f'{step} = "{kind}"' for step, kind in faults.items()) + "}"
    return (f'[plugins]\nenable = ["{plugin}"]\n[algorithms.{algorithm}]\nfaults = {table}\n'
            + (f"max_faulted_steps = {limit}\n" if limit is not None else ""))


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    config = tmp_path_factory.mktemp("plain") / "plugins.toml"
    config.write_text("[plugins]\nenable = []\n")
    return serve_in_a_process(None, config, ndt=4, max_new_tokens=NEW_TOKENS)


def _outputs(result):
    assert result["served"], result.get("error")
    return {rid: r["output_ids"] for rid, r in result["requests"].items()}


def test_every_fault_of_a_chain_drafter_is_contained_and_named(plain, tmp_path):
    config = tmp_path / "plugins.toml"
    config.write_text(_toml({0: "refusal", **CHAIN_FAULTS}, limit=20))
    served = serve_in_a_process("PROMPT_LOOKUP", config, ndt=4, max_new_tokens=NEW_TOKENS, overlap=OVERLAP,
                                worker="drafters:Faulty")
    assert _outputs(served) == _outputs(plain)
    warnings = [line for line in served["log"] if line.startswith("WARNING")]
    for step, expected in EXPECTED.items():
        assert any(PLUGIN + expected in line for line in warnings), (step, expected, warnings)
    assert any(", width=7): the algorithm declares widths 4 on the target worker at speculative_num_draft_tokens=4, "
               "not 7" in line for line in warnings), warnings
    assert any(PLUGIN + "refusal(req) for request 'mixed' raised RuntimeError: a refusal bug" in line
               for line in warnings), warnings
    assert any("its code took" in line and "in one decode step" in line for line in warnings), warnings
    assert all("the step went on without it, every request exact" in line for line in warnings
               if "its code took" not in line), warnings
    assert not any(line.startswith("ERROR") for line in served["log"]), served["log"]


def test_a_drafter_that_keeps_faulting_is_switched_off_and_the_rest_is_served_plainly(plain, tmp_path):
    config = tmp_path / "plugins.toml"
    config.write_text(_toml({step: "raise" for step in range(1, 5)}, limit=2))
    served = serve_in_a_process("PROMPT_LOOKUP", config, ndt=4, max_new_tokens=NEW_TOKENS, overlap=OVERLAP,
                                worker="drafters:Faulty")
    assert _outputs(served) == _outputs(plain)
    errors = [line for line in served["log"] if line.startswith("ERROR")]
    assert errors == ["ERROR " + PLUGIN + "switched off for this process after 3 faulted steps (max_faulted_steps = 2); "
                      "its requests are served without drafts, exactly"], served["log"]
    assert sum(line.startswith("WARNING") for line in served["log"]) == 3  # steps 1-3; step 4 never asked it


@pytest.mark.slow  # every release's fault classes: test_every_fault_of_a_chain_drafter_is_contained_and_named
def test_the_gpu_soak_s_randomly_faulting_drafter_is_contained_too(plain, tmp_path):
    """tools/gpu/faulty_drafter's worker (the H200 soak's FAULTY_LOOKUP, ~1% of its steps there) at a rate high
    enough that a few dozen steps fault several times, of several kinds."""
    config = tmp_path / "plugins.toml"
    config.write_text('[plugins]\nenable = ["prompt_lookup"]\n[algorithms.PROMPT_LOOKUP]\nfault_rate = 0.3\n'
                      'max_faulted_steps = 1000\n')
    faulty = Path(__file__).resolve().parents[2] / "tools" / "gpu" / "faulty_drafter"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(faulty), *sys.path]))
    served = serve_in_a_process("PROMPT_LOOKUP", config, ndt=4, max_new_tokens=NEW_TOKENS, overlap=OVERLAP,
                                worker="faulty_lookup_drafter.worker:FaultyLookupWorker", env=env)
    assert _outputs(served) == _outputs(plain)
    faulted = [line for line in served["log"] if "the step went on without it, every request exact" in line]
    hooks = {hook for hook in ("drafts(req, tokens, count)", "step_width(batch)") if any(hook in line for line in faulted)}
    assert len(faulted) >= 3 and len(hooks) == 2, served["log"]
    assert not any(line.startswith("ERROR") for line in served["log"]), served["log"]


def test_max_faulted_steps_must_be_a_count(tmp_path):
    from sglang_spec_plugins.config import load
    from sglang_spec_plugins.errors import ConfigError

    config = tmp_path / "plugins.toml"
    config.write_text("[algorithms.PROMPT_LOOKUP]\nmax_faulted_steps = -1\n")
    with pytest.raises(ConfigError, match=r"\[algorithms.PROMPT_LOOKUP\] max_faulted_steps must be an integer >= 0"):
        load(config)


BLOCK_FAULTS = {1: "raise", 2: "shape", 3: "dtype", 4: "out_of_vocabulary"}
BLOCK_PLUGIN = "plugin 'dflash_block' (sglang-spec-example-dflash-block==0.1.0): algorithm DFLASH_BLOCK: "


def test_every_fault_of_a_block_drafter_is_contained_and_named(tmp_path):
    target = llama_target(tmp_path / "target", TINY_LLAMA, seed=0, shared=0.4, favour=(29, 1.0))
    draft = accepting_draft(tmp_path / "draft", TINY_LLAMA, read_weights(target), 29, block_size=4,
                            target_layer_ids=[0])
    plain_config = tmp_path / "plain.toml"
    plain_config.write_text("[plugins]\nenable = []\n")
    plain = serve_in_a_process(None, plain_config, ndt=4, max_new_tokens=NEW_TOKENS, model=target)
    config = tmp_path / "plugins.toml"
    config.write_text(_toml(BLOCK_FAULTS, algorithm="DFLASH_BLOCK", plugin="dflash_block"))
    served = serve_in_a_process("DFLASH_BLOCK", config, ndt=4, max_new_tokens=NEW_TOKENS, model=target, draft=draft,
                                overlap=OVERLAP, worker="drafters:FaultyBlock")
    assert _outputs(served) == _outputs(plain)
    warnings = "\n".join(served["log"])
    for expected in ("drafts(batch, hidden) raised ValueError: a draft-model drafter bug",
                     "drafts(batch, hidden) returned drafts of shape (3, 0), not (3, >= 3)",
                     "drafts(batch, hidden) returned drafts of dtype torch.float32, not an integer dtype",
                     "drafts(batch, hidden) returned token ids outside [0, 256) in an earlier step"):
        assert BLOCK_PLUGIN + expected in warnings, (expected, served["log"])
    assert json.dumps(served["log"]).count("WARNING") == 4
