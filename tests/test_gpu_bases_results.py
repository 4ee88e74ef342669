"""The H200 re-run of the examples on the worker bases (tools/gpu/results/bases) says what its README says.

No GPU: ``compare.py`` reads the committed engine records of this run and of the runs before the bases.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "tools" / "gpu" / "results"

sys.path.insert(0, str(ROOT / "tools" / "gpu" / "engine"))
import compare  # noqa: E402


def _runs(folder: str):
    """(label, batch, prompts) -> (identical, requests, tokens per verify step) of every speculative engine."""
    rows = {}
    for engine in compare.summarize(compare.load(RESULTS / folder))["engines"]:
        for run in engine["runs"]:
            if run.get("committed_per_step") is not None and "identical" in run:
                rows[engine["label"], run["batch"], run["prompts"]] = (run["identical"], run["requests"],
                                                                       run["committed_per_step"])
    return rows


def test_every_row_is_the_one_before_the_bases():
    now, before = _runs("bases"), {**_runs("draft"), **_runs("sbd")}
    compared = [key for key in now if key[0].startswith(("dm_", "da_", "sbd_"))]
    assert len(compared) == 14 * 8  # 12 draft-model engines and SBD's two, 8 (batch, prompts) rows each
    assert all(now[key] == before[key] for key in compared)


def test_dflash_block_is_native_dflash_step_for_step():
    rows = [row for row in compare.against_native(compare.load(RESULTS / "bases")) if row["against"].endswith(
        ("_native_cg", "_native_nocg"))]
    assert len(rows) == 4 * 8
    assert all(row["same_outputs"] == row["requests"] == row["same_verify_steps"] for row in rows)
    assert min(row["committed_per_step"] for row in rows if row["engine"].startswith("da_")) > 2.9


def test_widths_by_batch_size_eager_is_plain_decoding():
    rows = {key: value for key, value in _runs("bases").items() if key[0].startswith("fiw_pl")}
    eager = [value for key, value in rows.items() if key[0] == "fiw_pl_nocg"]
    graphs = [value for key, value in rows.items() if key[0] == "fiw_pl_cg"]
    assert sum(v[0] for v in eager) == sum(v[1] for v in eager) == 82
    assert (sum(v[0] for v in graphs), sum(v[1] for v in graphs)) == (79, 82)
    readme = (RESULTS / "bases" / "README.md").read_text()
    assert "(82/82); with graphs 79/82" in readme
