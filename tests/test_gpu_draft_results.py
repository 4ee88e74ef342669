"""The draft-model results committed under tools/gpu/results/draft say what their README says.

No GPU: ``compare.py`` reads the committed engine records, as a reader regenerates the tables.
"""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "tools" / "gpu" / "results" / "draft"

sys.path.insert(0, str(ROOT / "tools" / "gpu" / "engine"))
import compare  # noqa: E402


@pytest.fixture(scope="module")
def records():
    return compare.load(RESULTS)


def test_the_block_drafter_at_the_full_block_is_native_dflash_request_for_request(records):
    pairs = [row for row in compare.against_native(records) if "_block_" in row["engine"]]
    assert {row["engine"] for row in pairs} == {"dm_block_cg", "dm_block_nocg", "da_block_cg", "da_block_nocg", "ds_block_cg"}
    for row in pairs:
        assert row["same_outputs"] == row["same_verify_steps"] == row["requests"], row


def test_without_cuda_graphs_every_draft_model_engine_is_plain_decoding(records):
    summary = {row["label"]: row for row in compare.summarize(records)["engines"]}
    eager = [label for label, row in summary.items() if row["spec"] and label.endswith("_nocg")]
    assert len(eager) == 6
    for label in eager:
        for run in summary[label]["runs"]:
            assert run["identical"] == run["requests"] == run["batch"], (label, run)


def test_the_speed_ratios_of_the_readme(records):
    ratios = [round(row["speed_ratio"], 2) for row in compare.against_native(records) if row["engine"] == "ds_block_cg"]
    readme = (RESULTS / "README.md").read_text()
    assert len(ratios) == 8 and all(f"| {ratio:.2f} |" in readme for ratio in ratios), ratios


def test_drafts_were_accepted_on_the_favoured_target(records):
    """The identities above hold where drafts are accepted: > 2.9 tokens a verify step at W = B = 4, > 1.6 at W = 2."""
    summary = {row["label"]: row for row in compare.summarize(records)["engines"]}
    for label, floor in (("da_native", 2.9), ("da_block", 2.9), ("da_part", 1.6)):
        for graphs in ("cg", "nocg"):
            steps = [run["committed_per_step"] for run in summary[f"{label}_{graphs}"]["runs"]]
            assert len(steps) == 8 and min(steps) > floor, (label, graphs, steps)


def test_the_readme_s_ratios_of_verifying_below_the_block(records):
    ratios = [round(row["speed_ratio"], 2) for row in compare.against_native(records) if row["engine"] == "ds_part_cg"]
    readme = (RESULTS / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| ") and line.count("|") == 5 and line[2].isdigit()]
    assert len(ratios) == 8 and [row.split("|")[4].strip() for row in rows] == [f"{r:.2f}" for r in ratios], (rows, ratios)


def test_every_graphed_divergence_was_measured_as_a_near_tie(records):
    """margins.py measured each divergence of divergences.json on the plain engine: within one bf16 step of its top
    token (0.25 on the random target), native DFLASH and DFLASH_BLOCK alike, and the README's table is what it read."""
    import json

    measured = compare.margins(RESULTS)
    divergences = json.loads((RESULTS / "divergences.json").read_text())
    assert sum(m["divergences"] for m in measured.values()) == len(divergences) == 365
    assert {label: m["divergences"] for label, m in measured.items()} == \
        {label: sum(d["label"] == label for d in divergences) for label in measured}
    assert max(m["max_margin"] for m in measured.values()) <= 0.25
    assert measured["dm_block_cg"] == measured["dm_native_cg"] and measured["da_block_cg"] == measured["da_native_cg"]
    readme = (RESULTS / "README.md").read_text()
    for label, m in measured.items():
        assert f"| {label} | {m['divergences']} | {m['chosen_are_top2']} | {m['max_margin']} |" in readme, label
