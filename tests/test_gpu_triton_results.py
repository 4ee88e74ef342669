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


def _committed_margins():
    rows = [json.loads(line) for line in (RESULTS / "reference_margins.jsonl").read_text().splitlines()]
    return [row for row in rows if row["label"] == "trs_sbd_nocg"]


@pytest.fixture(scope="module")
def again():
    """reference_margins.py's plain PyTorch forward of the favoured target at each SBD divergence, on this CPU."""
    pytest.importorskip("torch")
    import reference_margins

    return reference_margins.logprobs(RESULTS, "trs_sbd_nocg", 29)


def _departures(committed, found):
    """Where the committed rows are not the model's ``found`` again: a place or an engine's token (read from the
    records: exact), or, per dtype, a committed top-two token whose log-probability below the top (0 for the
    first, the gap for the second) is this CPU's beyond reference_margins.CPU_TOLERANCE. Near-tied tokens are
    compared as a set: which comes first depends on the CPU's kernels."""
    import reference_margins

    keys = ("batch", "prompts", "request", "position", "speculative", "plain")
    if [[row[k] for k in keys] for row in committed] != [[d[k] for k in keys] for d, _ in found]:
        return ["places"]
    departures = []
    for row, (_, values) in zip(committed, found):
        for dtype, tolerance in reference_margins.CPU_TOLERANCE.items():
            below = reference_margins.below_top(values[dtype], row[dtype]["top2"])
            for token, committed_below in zip(row[dtype]["top2"], (0.0, row[dtype]["gap"])):
                if abs(below[token] - committed_below) > tolerance:
                    departures.append((row["request"], dtype, token, committed_below, below[token]))
    return departures


def test_the_committed_margins_are_the_model_s(again):
    """reference_margins.py again (a plain PyTorch forward of the favoured target) gives the committed rows."""
    assert _departures(_committed_margins(), again) == []


def test_a_wrong_committed_margin_is_found(again):
    """The comparison above fails on a committed token far from the top, a wrong gap or a missing row, and not
    on near-tied tokens in the other order (forcing other CPUs' kernels, MKL_CBWR=COMPATIBLE, gave float16
    [29, 24888] at batch 32's request 11, where this CPU's is [24888, 29])."""
    committed = _committed_margins()

    def first_row(dtype, **changed):
        return [{**committed[0], dtype: {**committed[0][dtype], **changed}}, *committed[1:]]

    far = int(again[0][1]["float16"].argmin())
    swapped = [{**row, "float16": {**row["float16"], "top2": row["float16"]["top2"][::-1]}} for row in committed]
    assert _departures(swapped, again) == []
    wrong_token = first_row("float16", top2=[committed[0]["float16"]["top2"][0], far])
    assert [(d[1], d[2]) for d in _departures(wrong_token, again)] == [("float16", far)]
    assert [d[1] for d in _departures(first_row("bfloat16", gap=0.1), again)] == ["bfloat16"]
    assert _departures(committed[1:], again) == ["places"]


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
