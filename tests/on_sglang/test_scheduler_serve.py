"""The PROMPT_LOOKUP example drafts, verifies and accepts through SGLang's real
scheduler on a CPU, token-identical to plain greedy decoding by the same scheduler.

Each run is one process of ``sglang_spec_plugins.testing.scheduler_serve``:
the installed release's real ``Scheduler`` (see test_scheduler_start.py) on a
two-layer random Llama in float32, SGLang's triton attention backend under
``TRITON_INTERPRET=1`` (``torch_native`` cannot run TARGET_VERIFY), three
greedy requests sent through the tokenizer manager's ZMQ socket and served by
the release's own ``event_loop_normal``. Once without speculative decoding,
once per verify width 2, 3 and 4 at ``--speculative-num-draft-tokens 4``, and
once with widths by batch size while the batch grows and shrinks across the
buckets' boundaries (the widths read off the target's TARGET_VERIFY batches).

Committing one token too many (``accept_greedy`` + 1) made the outputs differ
from plain decoding here (checked by hand, 0.5.23, width 3).
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from sglang_spec_plugins.engine.worker_contract import contract
from sglang_spec_plugins.widths_by_batch_size import WidthsByBatchSize

NDT = 4
NEW_TOKENS = 16

pytestmark = pytest.mark.skipif(
    contract().non_overlap_schema != "v2-sync",
    reason=f"PROMPT_LOOKUP refuses SGLang {contract().release} by design: its scheduler runs synchronous plugin "
           f"workers on {contract().non_overlap_schema!r}, the example drives the V2 schema (0.5.14+)")


def _serve(tmp_path, algorithm=None, width=None, widths_by_batch=None, lengths=(NEW_TOKENS,), late_after=None):
    if importlib.util.find_spec("prompt_lookup_drafter") is None:
        pytest.fail("the example is not installed: pip install -e examples/prompt_lookup_drafter")
    for module in ("setproctitle", "uvloop"):  # imported by the scheduler; uvloop (0.5.14, 0.5.16) on receiving a request
        if importlib.util.find_spec(module) is None:
            pytest.fail(f"{module} is not installed: pip install -r tests/requirements-sglang-cpu.txt")
    config = tmp_path / f"plugins-{width}.toml"
    config.write_text('[plugins]\nenable = ["prompt_lookup"]\n[algorithms.PROMPT_LOOKUP]\n'
                      f'max_tokens_per_req = 16\nverify_width = {width or NDT}\n'
                      + (f"widths_by_batch_size = {widths_by_batch}\n" if widths_by_batch else ""))
    env = dict(os.environ, SGLANG_SPEC_PLUGINS_CONFIG=str(config), PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("SGLANG_SPEC_PLUGINS", None)
    command = [sys.executable, "-m", "sglang_spec_plugins.testing.scheduler_serve",
               *([algorithm] if algorithm else []), "--ndt", str(NDT), "--max-new-tokens", ",".join(map(str, lengths)),
               *(["--late-after", str(late_after)] if late_after is not None else [])]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result (rc {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    result = _serve(tmp_path_factory.mktemp("plain"))
    assert result["served"], result
    return result


@pytest.mark.parametrize("width", [2, 3, 4])
def test_prompt_lookup_is_token_identical_to_plain_greedy_and_accepts(plain, tmp_path, width):
    result = _serve(tmp_path, "PROMPT_LOOKUP", width)
    error = result["error"] or ""
    if not result["served"] and width != NDT and error.startswith(("PluginError", "EngineError")) \
            and f"triton on the target worker at width {width}" in error and "is refused" in error:
        pytest.skip(f"the loader refuses, by design, this release's triton backend below ndt: {error}")
    assert result["served"], result
    expected = {rid: r["output_ids"] for rid, r in plain["requests"].items()}
    assert {rid: r["output_ids"] for rid, r in result["requests"].items()} == expected
    for rid, request in result["requests"].items():
        assert request["completion_tokens"] == NEW_TOKENS and plain["requests"][rid]["spec_verify_ct"] == 0
        # SGLang counts the verify forwards; the first token comes from the prefill
        assert 0 < request["spec_verify_ct"] <= NEW_TOKENS - 1, request
    repetitive = result["requests"]["repetitive"]
    per_step = (repetitive["completion_tokens"] - 1) / repetitive["spec_verify_ct"]
    assert 1 < per_step <= width, (per_step, repetitive)


BUCKETS = "{1 = 4, 2 = 3, 3 = 2}"
"""Widths by batch size: 1 request verifies 4 tokens, 2 verify 3, 3 and more verify 2."""


def test_widths_by_batch_size_follow_the_batch_and_stay_token_identical(plain, tmp_path):
    """``repetitive`` and ``mixed`` start (batch 2: width 3); ``random`` joins after two
    verify steps (batch 3: width 2); they finish after 16, 12 and 6 tokens (batch 2,
    then 1: width 4). Each step's width is read off the TARGET_VERIFY ForwardBatch the
    target ran; outputs equal the plain run's (the first 12 and 6 tokens of theirs)."""
    lengths = {"repetitive": NEW_TOKENS, "mixed": 12, "random": 6}
    assert list(lengths) == ["repetitive", "mixed", "random"]  # PROMPTS' order; random is sent late
    result = _serve(tmp_path, "PROMPT_LOOKUP", widths_by_batch=BUCKETS, lengths=tuple(lengths.values()), late_after=2)
    error = result["error"] or ""
    if not result["served"] and error.startswith(("PluginError", "EngineError")) and "--attention-backend triton" in error \
            and "lays TARGET_VERIFY out at" in error:  # up to 0.5.16
        pytest.skip(f"the loader refuses, by design, SGLang {contract().release}'s triton backend with widths by batch "
                    f"size: {error.splitlines()[0]}")
    assert result["served"], result
    for rid, request in result["requests"].items():
        assert request["output_ids"] == plain["requests"][rid]["output_ids"][:lengths[rid]], rid
        assert request["completion_tokens"] == lengths[rid]
    steps = result["verify_steps"]
    # every verify forward of the run was recorded: SGLang counts one per request per step
    assert sum(size for size, _ in steps) == sum(r["spec_verify_ct"] for r in result["requests"].values()), steps
    buckets = WidthsByBatchSize.parse({1: 4, 2: 3, 3: 2})
    assert all(width == buckets.at(size) for size, width in steps), steps  # eager: each step at its batch's bucket
    sizes = [size for size, _ in steps]
    assert any(b > a for a, b in zip(sizes, sizes[1:])) and any(b < a for a, b in zip(sizes, sizes[1:])), steps
    assert len({width for _, width in steps}) >= 2, steps  # the width changed mid-run
    print(f"verify steps [batch size, width] on SGLang {contract().release}: {steps}")
