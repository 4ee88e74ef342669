"""The PROMPT_LOOKUP example drafts, verifies and accepts through SGLang's real
scheduler on a CPU, token-identical to plain greedy decoding by the same scheduler.

Each run is one process of ``sglang_spec_plugins.testing.scheduler_serve``:
the installed release's real ``Scheduler`` (see test_scheduler_start.py) on a
two-layer random Llama in float32, SGLang's triton attention backend under
``TRITON_INTERPRET=1`` (``torch_native`` cannot run TARGET_VERIFY), three
greedy requests sent through the tokenizer manager's ZMQ socket and served by
the release's own ``event_loop_normal``. Once without speculative decoding,
once per verify width 2, 3 and 4 at ``--speculative-num-draft-tokens 4``,
once with widths by batch size while the batch grows and shrinks across the
buckets' boundaries (the widths read off the target's TARGET_VERIFY batches),
once with widths chosen step by step by the acceptance controller, and once
with the CONTROLLED_ACCEPTANCE example drafting the plain run's own outputs at
a set acceptance (every request's verify count exactly what its draws give;
also under the overlap scheduler, ``event_loop_overlap``, where the release
runs a speculative worker under it on a CPU: 0.5.23),
and the SBD example (the target verifying its own carried guesses and a
masked block) at one width and at the widths it picks itself step by step.

Committing one token too many (``accept_greedy`` + 1) made the outputs differ
from plain decoding here (checked by hand, 0.5.23, width 3).

Outputs are compared token for token, which holds on any CPU: along the plain
run's greedy paths the target's two largest logits are at least 1.3e-7 apart
(dummy weights: logits of ~4e-6), and another CPU's kernels or thread count
moved its logits by at most 9e-13 (measured 2026-12-06, 0.5.23, with
ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 MKL_CBWR=COMPATIBLE
OMP_NUM_THREADS=1 against the defaults on an AVX-512 CPU), 5 orders below.
"""

import importlib.util
import json

import pytest

from sglang_spec_plugins.engine.worker_contract import contract
from sglang_spec_plugins.testing.scheduler_serve import overlap_on_a_cpu, serve_in_a_process
from sglang_spec_plugins.widths_by_batch_size import WidthsByBatchSize

NDT = 4
NEW_TOKENS = 16

# slow: the main run (0.5.23) runs it; on the other releases the real Scheduler's start (test_scheduler_start), the widths each runner reads (test_width_reaches_runner, test_widths_by_batch_size_graphs) and the model-free worker's members (test_model_free_worker) run on every release
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    contract().non_overlap_schema != "v2-sync",
    reason=f"PROMPT_LOOKUP refuses SGLang {contract().release} by design: its scheduler runs synchronous plugin "
           f"workers on {contract().non_overlap_schema!r}, the example drives the V2 schema (0.5.14+)")]


def _serve(tmp_path, algorithm=None, width=None, widths_by_batch=None, lengths=(NEW_TOKENS,), late_after=None, more=""):
    return _serve_with(tmp_path, algorithm, '[plugins]\nenable = ["prompt_lookup"]\n[algorithms.PROMPT_LOOKUP]\n'
                       f'max_tokens_per_req = 16\nverify_width = {width or NDT}\n'
                       + (f"widths_by_batch_size = {widths_by_batch}\n" if widths_by_batch else "") + more,
                       lengths, late_after)


def _serve_with(tmp_path, algorithm, toml, lengths=(NEW_TOKENS,), late_after=None, overlap=False):
    for example in ("prompt_lookup_drafter", "controlled_acceptance_drafter", "sbd_drafter"):
        if importlib.util.find_spec(example) is None:
            pytest.fail(f"the example is not installed: pip install -e examples/{example}")
    for module in ("setproctitle", "uvloop"):  # imported by the scheduler; uvloop (0.5.14, 0.5.16) on receiving a request
        if importlib.util.find_spec(module) is None:
            pytest.fail(f"{module} is not installed: pip install -r tests/requirements-sglang-cpu.txt")
    config = tmp_path / "plugins.toml"
    config.write_text(toml)
    return serve_in_a_process(algorithm, config, ndt=NDT, max_new_tokens=lengths, late_after=late_after, timeout=600,
                              overlap=overlap)


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
    skip_where_triton_refuses_widths(result)
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


def skip_where_triton_refuses_widths(result):
    """Up to 0.5.16 the loader refuses, by design, triton with widths other than ndt (at start-up)."""
    error = result["error"] or ""
    if not result["served"] and error.startswith(("PluginError", "EngineError")) and "--attention-backend triton" in error \
            and "lays TARGET_VERIFY out at" in error:
        pytest.skip(f"the loader refuses, by design, SGLang {contract().release}'s triton backend with widths other than "
                    f"ndt: {error.splitlines()[0]}")


CHOICES = {1: [1, 2, 4], 2: [1, 2, 3, 4], 3: [1, 2]}
"""Widths to choose from per batch size: the acceptance controller picks each step's."""


def test_widths_chosen_by_acceptance_step_by_step_stay_token_identical(plain, tmp_path):
    """PROMPT_LOOKUP with the acceptance controller deciding at every step (warm-up 1, interval 1) while
    the batch grows (``random`` joins after two verify steps) and shrinks (16, 12 and 6 tokens): outputs
    equal the plain run's, every TARGET_VERIFY the target ran is at the width StepWidths answered for
    that step (read off the ForwardBatch), among its batch's bucket, and the width changes mid-run."""
    lengths = {"repetitive": NEW_TOKENS, "mixed": 12, "random": 6}
    table = "{" + ", ".join(f"{k} = {v}" for k, v in CHOICES.items()) + "}"
    result = _serve(tmp_path, "PROMPT_LOOKUP", widths_by_batch=table, lengths=tuple(lengths.values()), late_after=2,
                    more="widths_by_acceptance = {warmup_steps = 1, interval_steps = 1}\n")
    skip_where_triton_refuses_widths(result)
    assert result["served"], result
    for rid, request in result["requests"].items():
        assert request["output_ids"] == plain["requests"][rid]["output_ids"][:lengths[rid]], rid
    steps, chosen = result["verify_steps"], result["chosen_widths"]
    assert steps == chosen, (steps, chosen)  # each verify ran at the width its step chose, for its batch
    buckets = WidthsByBatchSize.parse(CHOICES)
    assert all(width in buckets.widths_at(size) for size, width in steps), steps
    sizes = [size for size, _ in steps]
    assert any(b > a for a, b in zip(sizes, sizes[1:])) and any(b < a for a, b in zip(sizes, sizes[1:])), steps
    assert len({width for _, width in steps}) >= 2, steps
    print(f"verify steps [batch size, width] by acceptance on SGLang {contract().release}: {steps}")


def verify_steps_of(continuation, key, new_tokens, width, acceptance, seed):
    """The verify forwards a request takes when each step drafts ``continuation``'s next tokens,
    each kept as ``controlled_acceptance_drafter.draws.kept`` draws it: the first token comes from
    the prefill, a step commits its kept prefix and the target's own token."""
    from controlled_acceptance_drafter.draws import kept

    done, steps = 1, 0
    while done < new_tokens:
        steps += 1
        accepted = next((j for j in range(width - 1) if not kept(seed, key, done + j, acceptance)), width - 1)
        done += accepted + 1
    return steps


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlap"])
def test_controlled_acceptance_commits_exactly_what_its_draws_keep(plain, tmp_path, overlap):
    """CONTROLLED_ACCEPTANCE drafting the plain run's own outputs (recorded as its continuations), each
    token kept with probability 0.6: outputs equal the plain run's, and every request takes exactly the
    verify forwards its draws say (acceptance is the parameter, not luck), with the overlap scheduler too,
    where ``req.output_ids`` lags the step in flight (a drafter reading it there drafted tokens already
    committed: every request took 9 verify forwards, one token each; checked by hand, 0.5.23)."""
    if overlap and not overlap_on_a_cpu():
        pytest.skip(f"SGLang {contract().release}'s overlap scheduler drives no speculative worker on a CPU")
    import json

    from controlled_acceptance_drafter.draws import prompt_key
    from controlled_acceptance_drafter.record import record
    from sglang_spec_plugins.testing.scheduler_serve import PROMPTS

    new_tokens, acceptance, seed = 10, 0.6, 3  # 10 of the 16 recorded: every draft of a 4-wide chain has a recorded token
    continuations = tmp_path / "continuations.json"
    continuations.write_text(json.dumps(record((PROMPTS[rid], r["output_ids"]) for rid, r in plain["requests"].items())))
    result = _serve_with(tmp_path, "CONTROLLED_ACCEPTANCE",
                         '[plugins]\nenable = ["controlled_acceptance"]\n[algorithms.CONTROLLED_ACCEPTANCE]\n'
                         f'continuations = "{continuations}"\nacceptance = {acceptance}\nseed = {seed}\n', (new_tokens,),
                         overlap=overlap)
    assert result["served"], result
    for rid, request in result["requests"].items():
        assert request["output_ids"] == plain["requests"][rid]["output_ids"][:new_tokens], rid
        expected = verify_steps_of(plain["requests"][rid]["output_ids"], prompt_key(PROMPTS[rid]), new_tokens, NDT,
                                   acceptance, seed)
        assert request["spec_verify_ct"] == expected, (rid, request, expected)
    assert {w for _, w in result["verify_steps"]} == {NDT} and result["chosen_widths"]


def test_controlled_acceptance_cycles_its_own_widths_step_by_step(plain, tmp_path):
    """CONTROLLED_ACCEPTANCE with ``width_cycle = [2, 4]`` (the worker's own width each step, as the benchmark's
    switch-cost engines run it) while the batch grows and shrinks: outputs equal the plain run's, and the
    TARGET_VERIFY steps the target ran alternate 2, 4, 2, ... (read off the ForwardBatch), as chosen."""
    from controlled_acceptance_drafter.record import record
    from sglang_spec_plugins.testing.scheduler_serve import PROMPTS

    lengths = {"repetitive": NEW_TOKENS, "mixed": 12, "random": 6}
    continuations = tmp_path / "continuations.json"
    continuations.write_text(json.dumps(record((PROMPTS[rid], r["output_ids"]) for rid, r in plain["requests"].items())))
    result = _serve_with(tmp_path, "CONTROLLED_ACCEPTANCE",
                         '[plugins]\nenable = ["controlled_acceptance"]\n[algorithms.CONTROLLED_ACCEPTANCE]\n'
                         f'continuations = "{continuations}"\nacceptance = 0.6\n'
                         'widths_by_batch_size = {1 = [2, 4]}\nwidth_cycle = [2, 4]\n', tuple(lengths.values()), late_after=2)
    skip_where_triton_refuses_widths(result)
    assert result["served"], result
    for rid, request in result["requests"].items():
        assert request["output_ids"] == plain["requests"][rid]["output_ids"][:lengths[rid]], rid
    steps = result["verify_steps"]
    assert steps == result["chosen_widths"] and len(steps) >= 4, steps
    assert [width for _, width in steps] == [(2, 4)[i % 2] for i in range(len(steps))], steps
    sizes = [size for size, _ in steps]
    assert any(b > a for a, b in zip(sizes, sizes[1:])) and any(b < a for a, b in zip(sizes, sizes[1:])), steps


def _serve_sbd(tmp_path, settings, lengths=(NEW_TOKENS,), late_after=None):
    return _serve_with(tmp_path, "SBD", '[plugins]\nenable = ["sbd"]\n[algorithms.SBD]\nmax_tokens_per_req = 8\n' + settings,
                       lengths, late_after)


MASK = 255
"""SBD's default mask token: the last id of the tiny Llama's vocabulary (256)."""


def test_sbd_at_one_width_is_token_identical_to_plain_greedy(plain, tmp_path):
    """SBD at its one width (ndt): every chain is [root, guesses..., mask...], the first of each request [root, M, M, M]."""
    result = _serve_sbd(tmp_path, f"verify_width = {NDT}\n")
    assert result["served"], result
    assert {rid: r["output_ids"] for rid, r in result["requests"].items()} == \
        {rid: r["output_ids"] for rid, r in plain["requests"].items()}
    assert {w for _, w in result["verify_steps"]} == {NDT} and {w for _, w in result["chosen_widths"]} == {NDT}
    first = result["verify_tokens"][0]
    assert [first[i * NDT + 1:(i + 1) * NDT] for i in range(len(first) // NDT)] == [[MASK] * (NDT - 1)] * (len(first) // NDT)
    assert any(MASK not in chain[1:] for chain in result["verify_tokens"][1:]), "no step verified carried guesses"


SBD_CHOICES = {1: [2, 4, 8], 2: [2, 4, 8], 3: [2, 4]}
"""SBD's widths to choose from per batch size; the worker picks each step's."""


def test_sbd_picks_its_widths_step_by_step_and_stays_token_identical(plain, tmp_path):
    """SBD choosing its own width each step while the batch grows (``random`` joins after two verify
    steps) and shrinks (16, 12 and 6 tokens): outputs equal the plain run's; every TARGET_VERIFY the
    target ran is at the width the worker chose for that step (read off the ForwardBatch), among its
    batch's bucket; the first step is the narrowest (root and one mask) and the width changes mid-run."""
    lengths = {"repetitive": NEW_TOKENS, "mixed": 12, "random": 6}
    table = "{" + ", ".join(f"{k} = {v}" for k, v in SBD_CHOICES.items()) + "}"
    result = _serve_sbd(tmp_path, f"widths_by_batch_size = {table}\n", tuple(lengths.values()), late_after=2)
    skip_where_triton_refuses_widths(result)
    assert result["served"], result
    for rid, request in result["requests"].items():
        assert request["output_ids"] == plain["requests"][rid]["output_ids"][:lengths[rid]], rid
        assert request["completion_tokens"] == lengths[rid]
    steps, chosen = result["verify_steps"], result["chosen_widths"]
    assert steps == chosen, (steps, chosen)  # each verify ran at the width the worker chose, for its batch
    buckets = WidthsByBatchSize.parse(SBD_CHOICES)
    assert all(width in buckets.widths_at(size) for size, width in steps), steps
    assert steps[0] == [2, 2] and result["verify_tokens"][0][1::2] == [MASK, MASK], steps  # [root, M] each
    sizes = [size for size, _ in steps]
    assert any(b > a for a, b in zip(sizes, sizes[1:])) and any(b < a for a, b in zip(sizes, sizes[1:])), steps
    assert len({width for _, width in steps}) >= 2, steps  # the width changed mid-run (a random target's
    # guesses are mostly rejected, so the carried block fills and the width grows from the first step's)
    print(f"SBD verify steps [batch size, width] on SGLang {contract().release}: {steps}")


@pytest.mark.parametrize("settings, refusal", [
    ("mask_token_id = 256\n", r"\[algorithms\.SBD\] mask_token_id = 256: it must be an int in \[0, 256\)"),
    ("mask_token_id = -1\n", r"\[algorithms\.SBD\] mask_token_id = -1: it must be an int in \[0, 256\)"),
    ("mask_block = 0\n", r"\[algorithms\.SBD\] mask_block = 0: it must be an int >= 1"),
])
def test_sbd_bad_settings_are_refused_naming_the_key_before_serving(tmp_path, settings, refusal):
    import re

    result = _serve_sbd(tmp_path, f"verify_width = {NDT}\n" + settings)
    assert not result["served"] and not result.get("verify_steps"), result
    assert "plugin 'sbd'" in result["error"] and re.search(refusal, result["error"]), result["error"]
