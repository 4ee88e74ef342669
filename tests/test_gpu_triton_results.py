"""The H200 run of per-step widths on triton, SGLang 0.5.17 (tools/gpu/results/triton_0.5.17), says what its README says.

No GPU: ``compare.py`` reads the committed engine records; the SBD divergences' margins are the model's own,
computed again on this CPU.
"""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "tools" / "gpu" / "results" / "triton_0.5.17"

sys.path.insert(0, str(ROOT / "tools" / "gpu" / "engine"))
import compare  # noqa: E402


def _places(label):
    return {(d["batch"], d["prompts"], d["request"], d["position"], d["speculative"], d["plain"])
            for d in compare.divergences(compare.load(RESULTS)) if d["label"] == label}


def test_the_readme_table_is_the_records():
    readme = (RESULTS / "README.md").read_text()
    engines = compare.summarize(compare.load(RESULTS))["engines"]
    speculative = [e for e in engines if e["spec"]]
    assert len(speculative) == 6 and all(e["ok"] for e in engines)
    for engine in speculative:
        runs = engine["runs"]
        steps = [run["committed_per_step"] for run in runs]
        row = (f"| {engine['label']} | {sum(r['identical'] for r in runs)}/{sum(r['requests'] for r in runs)} | "
               f"{min(steps):.2f}-{max(steps):.2f} |")
        assert row in readme, row
    assert max(r["committed_per_step"] for e in speculative if e["label"].startswith("trs_sbd") for r in e["runs"]) > 2


def test_divergences_are_the_same_with_graphs_and_at_other_widths():
    for engine in ("trs_sbd", "trw_pl_widths", "trw_pl_below"):
        assert _places(f"{engine}_cg") == _places(f"{engine}_nocg") != set()
    assert len(_places("trw_pl_widths_nocg")) == 9 and len(_places("trw_pl_below_nocg")) == 11
    assert _places("trw_pl_widths_nocg") <= _places("trw_pl_below_nocg")


def test_each_sbd_divergence_is_a_near_tie_of_the_model():
    committed = [json.loads(line) for line in (RESULTS / "reference_margins.jsonl").read_text().splitlines()]
    assert {(r["label"], r["batch"], r["prompts"], r["request"], r["position"]) for r in committed} == {
        (label, *place[:4]) for label in ("trs_sbd_nocg", "trs_sbd_cg") for place in _places(label)}
    for row in committed:
        for dtype in ("float32", "float16"):
            assert set(row[dtype]["top2"]) == {row["speculative"], row["plain"]} and row[dtype]["gap"] <= 0.002, row


def test_the_committed_margins_are_the_model_s():
    """reference_margins.py again (a plain PyTorch forward of the favoured target) gives the committed rows."""
    pytest.importorskip("torch")
    import reference_margins

    committed = [json.loads(line) for line in (RESULTS / "reference_margins.jsonl").read_text().splitlines()]
    again = reference_margins.margins(RESULTS, "trs_sbd_nocg", 29)
    assert again == [{k: v for k, v in row.items() if k != "label"} for row in committed if row["label"] == "trs_sbd_nocg"]


def test_each_prompt_lookup_divergence_was_a_near_tie_on_the_h200():
    """margins.py on the H200's plain triton engine (float16): every PROMPT_LOOKUP divergence of the committed
    divergences.json, graphs on and off, is between the plain engine's two most likely tokens, as the README says."""
    divergences = json.loads((RESULTS / "divergences.json").read_text())
    assert divergences == compare.divergences(compare.load(RESULTS))
    measured = compare.margins(RESULTS)
    assert {label: m["divergences"] for label, m in measured.items()} == {
        "trw_pl_widths_nocg": 9, "trw_pl_widths_cg": 9, "trw_pl_below_nocg": 11, "trw_pl_below_cg": 11}
    assert all(m["chosen_are_top2"] == m["divergences"] and m["max_margin"] <= 0.0625 for m in measured.values())
    rows = [json.loads(line) for line in (RESULTS / "margins.jsonl").read_text().splitlines()]
    asked = {(d["label"], d["batch"], d["prompts"], d["request"], d["position"]) for d in divergences
             if d["label"].startswith("trw_")}
    assert {(r["label"], r["batch"], r["prompts"], r["request"], r["position"]) for r in rows} == asked
    readme = (RESULTS / "README.md").read_text()
    assert "in all 40" in readme and "at most 0.0625 apart" in readme
    for label, m in measured.items():
        assert f"| {label} | {m['divergences']} | {m['chosen_are_top2']} | {m['max_margin']} |" in readme
