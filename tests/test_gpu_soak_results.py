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
