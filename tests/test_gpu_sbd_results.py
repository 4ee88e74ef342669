"""The SBD results committed under tools/gpu/results/sbd say what their README says.

No GPU: ``compare.py`` reads the committed engine records.
"""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "tools" / "gpu" / "results" / "sbd"

sys.path.insert(0, str(ROOT / "tools" / "gpu" / "engine"))
import compare  # noqa: E402

NEAR_TIES = {(8, "repetitive", 6, 29), (32, "repetitive", 11, 57), (64, "repetitive", 7, 50), (64, "repetitive", 47, 59)}
"""(batch, prompts, request, first differing token) of the eager engine's divergences, measured as near-ties (README)."""


def test_the_readme_table_is_the_records():
    summary = {row["label"]: row for row in compare.summarize(compare.load(RESULTS))["engines"]}
    readme = (RESULTS / "README.md").read_text()
    for label in ("sbd_sbd_nocg", "sbd_sbd_cg"):
        runs = summary[label]["runs"]
        steps = [run["committed_per_step"] for run in runs]
        row = (f"| {label} | {sum(run['identical'] for run in runs)}/{sum(run['requests'] for run in runs)} | "
               f"{min(steps):.2f}-{max(steps):.2f} |")
        assert row in readme and min(steps) > 2, row


def test_the_eager_divergences_are_the_ones_measured():
    records = compare.load(RESULTS)
    found = {(d["batch"], d["prompts"], d["request"], d["position"]) for d in compare.divergences(records)
             if d["label"] == "sbd_sbd_nocg"}
    assert found == NEAR_TIES


def test_each_eager_divergence_is_a_near_tie_of_the_model():
    """The README's reading, again on this CPU: at each divergence the model's own two most likely tokens are
    the two engines' tokens, a few hundredths apart (reference_margins.py: a plain PyTorch forward)."""
    pytest.importorskip("torch")
    import reference_margins

    rows = reference_margins.margins(RESULTS, "sbd_sbd_nocg", 29)
    assert {(r["batch"], r["prompts"], r["request"], r["position"]) for r in rows} == NEAR_TIES
    for row in rows:
        for dtype in ("float32", "bfloat16"):
            assert set(row[dtype]["top2"]) == {row["speculative"], row["plain"]} and row[dtype]["gap"] < 0.05, row


def test_every_divergence_was_a_near_tie_on_the_h200_too():
    """margins.py on the H200's plain engine: every divergence of divergences.json (graphs on and off) is between
    its two most likely tokens, a bf16 step or two apart, as the README says."""
    import json

    divergences = json.loads((RESULTS / "divergences.json").read_text())
    assert divergences == compare.divergences(compare.load(RESULTS))
    measured = compare.margins(RESULTS)
    assert {label: m["divergences"] for label, m in measured.items()} == {"sbd_sbd_nocg": 4, "sbd_sbd_cg": 7}
    assert all(m["chosen_are_top2"] == m["divergences"] and m["max_margin"] <= 0.0156 for m in measured.values())
    assert "in all 11 the two engines' tokens are its two most likely, at most 0.0156 apart" in (RESULTS / "README.md").read_text()
