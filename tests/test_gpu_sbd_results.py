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


NEAR_TIE = 0.05
"""A near-tie's width in log-probability (the README's "a few hundredths"). The widest here, 0.020 in float32 and
0.008 in bf16 (README), plus how far another CPU may move it (reference_margins.CPU_TOLERANCE: 0.001 and 0.031),
fits."""


@pytest.fixture(scope="module")
def eager():
    """reference_margins.py's plain PyTorch forward of the favoured target at each eager divergence."""
    pytest.importorskip("torch")
    import reference_margins

    return reference_margins.logprobs(RESULTS, "sbd_sbd_nocg", 29)


def _far_from_the_top(found):
    """(place, dtype, token, its log-probability below the model's top) for each engine's token, at each
    divergence of ``found``, that lies more than NEAR_TIE below the top, in float32 or bf16."""
    import reference_margins

    return [((d["batch"], d["prompts"], d["request"], d["position"]), dtype, token, below)
            for d, values in found for dtype in ("float32", "bfloat16")
            for token, below in reference_margins.below_top(values[dtype], (d["speculative"], d["plain"])).items()
            if below > NEAR_TIE]


def test_each_eager_divergence_is_a_near_tie_of_the_model(eager):
    """The README's reading, again on this CPU: at each divergence both engines' tokens lie within a few
    hundredths of the model's most likely token. Which of them is first, or whether a third lies as near (24888,
    0.018 below the top at batch 64's request 47), depends on the CPU's kernels: a set within NEAR_TIE, no order."""
    assert {(d["batch"], d["prompts"], d["request"], d["position"]) for d, _ in eager} == NEAR_TIES
    assert _far_from_the_top(eager) == []


def test_a_token_far_from_the_top_is_no_near_tie(eager):
    """The check above fails where an engine's token is not one the model nearly chose: the least likely token
    in place of the speculative engine's, at the first divergence."""
    d, values = eager[0]
    far = int(values["float32"].argmin())
    found = _far_from_the_top([({**d, "speculative": far}, values)])
    assert [(dtype, token) for _, dtype, token, _ in found] == [("float32", far), ("bfloat16", far)]
    assert all(below > 1 for *_, below in found)


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
