"""The H200 soak results committed under tools/gpu/results/soak say what their README says.

No GPU: the summaries ``testing.soak.verdict`` wrote on the H200 are read back.
"""

import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parent.parent / "tools" / "gpu" / "results" / "soak"
SOAKS = ("pl", "dfb")


@pytest.fixture(scope="module", params=SOAKS)
def summary(request):
    return request.param, json.loads((RESULTS / f"{request.param}_summary.json").read_text())


def test_nothing_was_lost(summary):
    """Every phase sent its requests, finished every greedy one, refused with the plugin's message, ended idle."""
    _, found = summary
    assert set(found["phases"]) == {"plain", "spec", "http"}
    for phase, entry in found["phases"].items():
        verdict = entry["verdict"]
        assert entry["problems"] == [] and entry["rc"] == 0, (phase, entry["problems"])
        assert entry["sent"] == entry["planned"] and verdict["finished"] == verdict["greedy"], phase
        assert verdict["refused_with_message"] == verdict["refused"], phase
        assert entry["end_state"]["flush_cache"] and entry["end_state"]["alive"], phase
        assert all(load["num_used_tokens"] == load["num_running_reqs"] == 0 for load in entry["end_state"]["loads"])


def test_the_speculative_phases_were_retracted_and_refused_and_aborted(summary):
    _, found = summary
    for phase in ("spec", "http"):
        verdict = found["phases"][phase]["verdict"]
        assert verdict["retractions"] > 0 and verdict["refused"] > 0 and verdict["aborted"] > 0, phase
        assert verdict["identical"] + len(verdict["divergent"]) == verdict["compared"] == verdict["greedy"], phase


def test_every_divergence_is_at_the_plain_engine_s_top_two(summary):
    _, found = summary
    for phase in ("spec", "http"):
        measured = found["margins"][phase]["measured"]
        assert len(measured) == found["margins"][phase]["divergent"] == len(found["phases"][phase]["verdict"]["divergent"])
        assert all(row["chosen_are_top2"] and row["margin"] <= 0.25 for row in measured), phase


def test_the_readme_table_is_the_summaries():
    readme = (RESULTS / "README.md").read_text()
    for name in SOAKS:
        found = json.loads((RESULTS / f"{name}_summary.json").read_text())
        for phase in ("spec", "http"):
            entry, verdict = found["phases"][phase], found["phases"][phase]["verdict"]
            row = (f"| {verdict['identical']:,} / {verdict['compared']:,} | {verdict['refused']} ({verdict['refused_with_message']}) "
                   f"| {verdict['aborted']} | {verdict['retractions']} ({verdict['retracted_requests']}) | {verdict['tokens']:,} "
                   f"| {entry['wall_s']} s ({entry['tokens_per_s']:.0f} tok/s) |")
            assert row in readme, (name, phase, row)


# ---- 2026-12-06: the bases serve every request kind, under SGLang's overlap scheduler; a drafter that faults
BEYOND_GREEDY_SOAKS = ("mix", "faults", "dfb_mix")
"""``mix``: PROMPT_LOOKUP; ``faults``: FAULTY_LOOKUP (``tools/gpu/faulty_drafter``, PROMPT_LOOKUP faulting in ~1%
of its decode steps); ``dfb_mix`` (2026-12-07, an H100): DFLASH_BLOCK with its accepting draft model on the
favoured target. All: 30% sampled, 10% logprob, 10% JSON-schema and 5% aborted requests, overlap on."""
ALGORITHMS = {"mix": "PROMPT_LOOKUP", "faults": "FAULTY_LOOKUP", "dfb_mix": "DFLASH_BLOCK"}
SENT_BEFORE_THE_BUDGET = {("dfb_mix", "spec"): 1923}
"""Phases that stopped sending before their budget ran out (the soak shared the GPU with training): their one
problem, and how many requests they sent."""


@pytest.fixture(scope="module", params=BEYOND_GREEDY_SOAKS)
def soak_run(request):
    """``(name, summary, outcomes by phase, the request set)`` of a committed soak, read from its tarball."""
    import tarfile

    from sglang_spec_plugins.testing.soak import mixed_requests

    name = request.param
    with tarfile.open(RESULTS / f"{name}.tar.xz") as tar:
        def read(member):
            return tar.extractfile(f"{name}/{member}").read().decode()

        parameters = json.loads(read("requests.json"))
        outcomes = {phase: {row.pop("rid"): row for row in map(json.loads, read(f"{phase}.jsonl").splitlines())}
                    for phase in ("plain", "spec", "http")}
    requests = mixed_requests(parameters["requests"], parameters["seed"], mix=parameters["mix"])
    return name, json.loads((RESULTS / f"{name}_summary.json").read_text()), outcomes, requests, parameters


def test_every_request_kind_was_served_and_nothing_was_lost(soak_run):
    from sglang_spec_plugins.testing.soak import BEYOND_GREEDY, JSON, LOGPROB, SAMPLED

    name, found, outcomes, requests, parameters = soak_run
    assert parameters["sync"] is False and parameters["algorithm"] == ALGORITHMS[name]
    kinds = [r.kind for r in requests]
    assert kinds.count(SAMPLED) >= 0.3 * len(kinds) * 0.9 and kinds.count(LOGPROB) >= 0.1 * len(kinds) * 0.9
    assert kinds.count(JSON) >= 0.1 * len(kinds) * 0.9  # the shares, within the draw's spread
    for phase in ("spec", "http"):
        entry, verdict = found["phases"][phase], found["phases"][phase]["verdict"]
        sent = SENT_BEFORE_THE_BUDGET.get((name, phase), len(requests))
        short = [] if sent == len(requests) else [f"sent {sent} of {len(requests)} requests before the budget ran out"]
        assert entry["problems"] == short and entry["rc"] == 0 and entry["planned"] == len(requests), phase
        assert entry["sent"] == len(outcomes[phase]) == sent, phase
        assert verdict["refused"] == 0 and verdict["finished"] == verdict["greedy"], phase
        assert verdict["served_beyond_greedy"] == sum(r.kind in BEYOND_GREEDY for r in requests if r.rid in outcomes[phase]), phase
        assert entry["end_state"]["flush_cache"] and entry["end_state"]["alive"], phase
        assert all(load["num_used_tokens"] == load["num_running_reqs"] == 0 for load in entry["end_state"]["loads"])
        assert entry["log"]["scheduler_exceptions"] == 0 and entry["log"]["start_up_check"] == 1, phase


def test_the_summaries_are_the_verdict_of_the_committed_outcomes(soak_run):
    from sglang_spec_plugins.testing.soak import DETERMINISTIC, verdict

    name, found, outcomes, requests, _ = soak_run
    plain = {rid: o["output_ids"] for rid, o in outcomes["plain"].items()}
    assert set(plain) == {r.rid for r in requests if r.kind in DETERMINISTIC}
    for phase in ("spec", "http"):
        sent = requests[:SENT_BEFORE_THE_BUDGET.get((name, phase), len(requests))]  # sent in the set's order
        assert verdict(sent, outcomes[phase], plain) == found["phases"][phase]["verdict"], phase


def test_each_divergence_is_a_near_tie_of_the_plain_engine(soak_run):
    """bf16 logits of the tiny random Llama: the speculative token at most 0.25 behind the plain engine's most
    likely (one bf16 step at these log-probabilities, -0.6 to -1.9); the plain engine's own token at most 0.5
    behind, where its decode step and its prefill of the same prefix disagree (logprob requests)."""
    _, found, _, _, _ = soak_run
    for phase in ("spec", "http"):
        divergent = {d["rid"] for d in found["phases"][phase]["verdict"]["divergent"]}
        rows = {r["rid"]: r for r in found["margins"][phase]["measured"]}
        assert divergent <= set(rows) and len(divergent) <= 0.02 * found["phases"][phase]["verdict"]["compared"]
        for rid in divergent:
            behind = rows[rid]["behind"]
            assert behind["speculative"] is not None and behind["speculative"] <= 0.25 + 1e-6, rows[rid]
            assert behind["plain"] is not None and behind["plain"] <= 0.5 + 1e-6, rows[rid]


def test_the_faulting_drafter_faulted_and_every_fault_was_contained(soak_run):
    name, found, _, _, _ = soak_run
    for phase in ("spec", "http"):
        log = found["phases"][phase]["log"]
        if name != "faults":
            assert log["faulted_steps"] == {}, phase
        else:
            assert log["faulted_steps"].get("drafts", 0) > 0 and log["faulted_steps"].get("step_width", 0) > 0, phase
        assert log["switched_off"] == 0, phase


def test_the_readme_table_is_the_beyond_greedy_summaries():
    readme = (RESULTS / "README.md").read_text()
    for name in BEYOND_GREEDY_SOAKS:
        found = json.loads((RESULTS / f"{name}_summary.json").read_text())
        for phase in ("spec", "http"):
            entry, verdict = found["phases"][phase], found["phases"][phase]["verdict"]
            faulted = sum(entry["log"]["faulted_steps"].values())
            row = (f"| {verdict['greedy']:,} / {verdict['finished']:,} | {verdict['served_beyond_greedy']:,} "
                   f"| {verdict['identical']:,} / {verdict['compared']:,} | {verdict['json_valid']} + {verdict['json_unclosed']} "
                   f"| {verdict['aborted']} | {faulted} | {verdict['tokens']:,} |")
            assert row in readme, (name, phase, row)
