"""compare.py's reading of ``run.sh real`` (every drafter on the model trained on the H100/H200), on results made
here by engine_check.py's own ``run`` with ``sglang.Engine`` stood in for: the tables per prompt kind (tokens per
second, ratio to plain decoding, tokens per verify step, the rounds' spread, identity), issue 46's bars, the
comparison with native DFLASH, and the divergences' prompts read from the prompts file the engines read.

The stand-in engine answers every request with tokens drawn from its prompt, commits a set number of tokens per
verify step and takes a set time per token on a clock of the test's own (engine_check reads ``time.time``), so
every figure of the tables is known beforehand. When ``tools/gpu/results/real/`` holds a device run's results
(``engines*.jsonl``, ``prompts.json``, ``train.json``), the same reading runs on them.
"""

from __future__ import annotations

import json
import math
import re
import sys
import tarfile
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "tools" / "gpu" / "engine"
COMMITTED = ROOT / "tools" / "gpu" / "results" / "real"
sys.path.insert(0, str(ENGINE))

import compare  # noqa: E402
import engine_check  # noqa: E402

PROMPTS = {"completion": [[10 + i, 20 + i, 30 + i] for i in range(70)], "edit": [[40 + i, 50, 40 + i, 50] for i in range(70)]}
NEW = 9
"""New tokens per request: 8 after the first (the prefill's), so a request takes ceil(8 / per_step) verify steps."""
ENGINES = {  # label: (tokens per second at every cell, tokens committed per verify step, overlap, diverges)
    "base": (1000.0, None, True, None), "sync": (900.0, None, False, None), "pl_w2": (1200.0, 2, False, None),
    "pl_w4": (1500.0, 4, False, None), "pl_acc": (1470.0, 4, False, None), "native": (2000.0, 8, True, None),
    "block": (1960.0, 8, False, True), "part_w4": (1800.0, 4, False, None),
}
"""pl_acc runs 0.98x the best static width (pl_w4): the controller's bar met; block 0.98x native: met. block's
request on each kind's second prompt (in every cell) leaves plain decoding at its third token."""


class Clock:
    def __init__(self):
        self.now = 0.0

    def time(self):
        return self.now


def stand_in_sglang(clock: Clock, speed: float, per_step, diverge: bool):
    """A ``sglang`` module whose Engine answers as the module doc says; its 17th call takes 10% longer."""
    module = types.ModuleType("sglang")
    module.__version__ = "0.5.16"

    class Engine:
        def __init__(self, **kwargs):
            self.server_args = types.SimpleNamespace(disable_overlap_schedule=kwargs.get("disable_overlap_schedule", False),
                                                     max_running_requests=kwargs.get("max_running_requests"))
            self.calls = 0

        def generate(self, input_ids, sampling_params):
            self.calls += 1
            out = []
            for ids in input_ids:
                tokens = [(ids[j % len(ids)] + j) % 97 for j in range(NEW)]
                if diverge and list(ids) in (PROMPTS["completion"][1], PROMPTS["edit"][1]):
                    tokens[2] += 1
                steps = math.ceil((NEW - 1) / per_step) if per_step else 0
                out.append({"output_ids": tokens, "meta_info": {"completion_tokens": NEW, "spec_verify_ct": steps,
                                                                "finish_reason": {"type": "length"}}})
            clock.now += len(input_ids) * NEW / speed * (1.1 if self.calls == 17 else 1.0)
            return out

        def flush_cache(self):
            return types.SimpleNamespace(success=True)

        def shutdown(self):
            pass

    module.Engine = Engine
    return module


def _record(tmp_path, monkeypatch, prefix: str, name: str) -> dict:
    speed, per_step, overlap, diverge = ENGINES[name]
    clock = Clock()
    monkeypatch.setitem(sys.modules, "sglang", stand_in_sglang(clock, speed, per_step, diverge))
    monkeypatch.setattr(engine_check, "time", clock)
    argv = [f"{prefix}_{name}_cg", "--backend", "flashinfer", "--model", str(tmp_path / "target"),
            "--prompts", str(tmp_path / "prompts.json"),
            "--batches", "1,8,32,64", "--min-requests", "4", "--timing", "--rounds", "3", "--max-running", "64",
            "--overlap", "on" if overlap else "off"]
    if per_step:
        argv += ["--spec", "SOMETHING", "--ndt", "8"]
    args = engine_check.arguments().parse_args(argv)
    record = {"label": args.label, "spec": args.spec, "sampling": args.sampling, "prompts_file": "prompts.json",
              "min_requests": args.min_requests}
    engine_check.run(args, record)
    return record


@pytest.fixture
def results(tmp_path, monkeypatch):
    (tmp_path / "prompts.json").write_text(json.dumps({"kinds": PROMPTS}))
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "model.safetensors").write_bytes(b"")  # weights: no --load-format dummy
    lines = [json.dumps(_record(tmp_path, monkeypatch, "rl", name)) for name in ENGINES]
    (tmp_path / "engines_real_a.jsonl").write_text("\n".join(lines[:4]) + "\n")  # two calls' files
    (tmp_path / "engines_real_b.jsonl").write_text("\n".join(lines[4:]) + "\n")
    return tmp_path


def test_each_cell_s_speed_ratio_and_acceptance(results):
    rows = compare.real_cells(compare.load(results), "rl")
    assert len(rows) == len(ENGINES) * 4 * 2
    for row in rows:
        speed, per_step, overlap, diverge = ENGINES[row["engine"]]
        assert row["tokens_per_s"] == pytest.approx(speed, rel=1e-3)
        assert row["vs_plain"] == pytest.approx(speed / ENGINES["base"][0], abs=1e-3)
        assert row["per_step"] == (None if per_step is None else pytest.approx((NEW - 1) / math.ceil((NEW - 1) / per_step)))
        # the 17th call is one of the four of the first round's batch-1 completion cell: that round 0.1/4.1 slower
        slowed = row["batch"] == 1 and row["prompts"] == "completion"
        assert row["spread"] == (pytest.approx(0.1 / 4.1, abs=2e-3) if slowed else 0.0)
        assert row["overlap"] is overlap and row["sampling"] == "greedy"
        assert row["requests"] == max(row["batch"], 4)
        assert row["identical"] == row["requests"] - int(bool(diverge))


def test_the_bars_cell_by_cell(results, monkeypatch):
    bars = compare.real_bars(compare.load(results), "rl")
    assert {b["bar"] for b in bars} == {"DFLASH_BLOCK / native DFLASH", "controller / best static (pl_w4)"}
    assert len(bars) == 2 * 4 * 2 and all(b["met"] and b["ratio"] == pytest.approx(0.98, abs=1e-3) for b in bars)
    monkeypatch.setattr(compare, "BAR", 0.99)
    assert not any(b["met"] for b in compare.real_bars(compare.load(results), "rl"))


def test_the_markdown_tables(results):
    text = compare.real_markdown(compare.load(results), "rl")
    assert "**completion**" in text and "**edit**" in text
    row = next(line for line in text.splitlines() if line.startswith("| block |"))
    assert row.split(" | ")[1:4] == ["off", "1960, 1.96x, 8.0 (2.4%)", "1960, 1.96x, 8.0 (0.0%)"]
    assert row.endswith(f"| {(4 + 8 + 32 + 64) - 4}/108 |")
    assert "| DFLASH_BLOCK / native DFLASH | 64 | edit | 0.98 | yes |" in text
    assert "| rl_block_cg | rl_native_cg | 64 | edit | 63/64 | 64/64 | 8.0 (8.0) |" in text


def test_the_block_drafter_against_native_and_below_the_block(results):
    rows = compare.against_native(compare.load(results))
    assert {(r["engine"], r["against"]) for r in rows} == {("rl_block_cg", "rl_native_cg"), ("rl_part_w4_cg", "rl_block_cg")}
    block = [r for r in rows if r["engine"] == "rl_block_cg"]
    assert all(r["same_outputs"] == r["requests"] - 1 and r["same_verify_steps"] == r["requests"] for r in block)


def test_divergences_carry_the_prompt_the_engine_was_given(results):
    """Each diverging request's prompt comes from the prompts file through engine_check's own batching: at batch 1
    four requests one after another, the second of them on the file's second prompt."""
    found = [d for d in compare.divergences(compare.load(results), results) if d["label"] == "rl_block_cg"]
    assert len(found) == 8  # one a cell
    first = next(d for d in found if d["batch"] == 1 and d["prompts"] == "edit")
    prompt = PROMPTS["edit"][1]
    plain = [(prompt[j % len(prompt)] + j) % 97 for j in range(NEW)]
    assert (first["position"], first["input_ids"], first["plain"], first["speculative"]) == \
        (2, prompt + plain[:2], plain[2], plain[2] + 1)


@pytest.mark.skipif(not (COMMITTED / "train.json").is_file(), reason="no device run committed under tools/gpu/results/real yet")
def test_the_committed_device_run_reads_back():
    """The committed run: a trained target and draft, every engine's cells read, greedy identities where greedy."""
    train = json.loads((COMMITTED / "train.json").read_text())
    assert train["target"]["held_out"]["perplexity"] > 1 and train["draft"]["acceptance"]["all"]["tokens_per_step"]
    records = compare.load(COMMITTED)
    for prefix in sorted({label.split("_")[0] for label in records} - {"warm"}):  # warm_*: untimed JIT warm-up engines
        rows = compare.real_cells(records, prefix)
        assert rows and compare.real_markdown(records, prefix)
        for row in rows:
            assert row["tokens_per_s"] > 0 and (row["per_step"] is None or row["per_step"] >= 1)


def kinds_record(label, outputs, logprobs, texts, finishes, error_kind=None):
    kinds = {"penalised": {"output_ids": outputs}, "logprob": {"output_ids": outputs, "logprobs": logprobs},
             "json": {"output_ids": outputs, "text": texts}, "sampled": {"output_ids": outputs, "finish": finishes}}
    if error_kind:
        kinds[error_kind] = {"error": "ValueError: refused"}
    return {"label": label, "kinds": kinds}


def test_every_request_kind_against_plain_decoding():
    """compare.py --kinds: identical requests per kind, the logprob gap up to the first differing token only,
    JSON texts that parse, sampled requests run to their length, a kind that failed, and an engine that stopped
    before any kind ran (its log's error)."""
    plain = kinds_record("rlo_kinds_base_cg", [[1, 2, 3], [4, 5, 6]], [[-0.5, -1.0, -2.0], [-0.1, -0.2, -0.3]],
                         ['{"a": 1}', '{"a"'], ["length", "length"])
    spec = kinds_record("rlo_kinds_pl_cg", [[1, 2, 3], [4, 9, 6]], [[-0.5, -1.004, -2.0], [-0.1, -5.0, -9.0]],
                        ['{"a": 1}', '{"b": 2}'], ["{'type': 'length', 'length': 3}", "abort"])
    failed = kinds_record("rlo_kinds_block_cg", [[1, 2, 3], [4, 5, 6]], [[-0.5, -1.0, -2.0], [-0.1, -0.2, -0.3]],
                          ["", ""], ["length", "length"], error_kind="json")
    stopped = {"label": "rlo_kinds_sbd_cg", "ok": False, "failure": "called a synchronizing CUDA operation"}
    records = {r["label"]: r for r in (plain, spec, failed, stopped)}
    rows = {(r["engine"], r["kind"]): r for r in compare.kinds_rows(records, "rlo")}
    assert {engine for engine, _ in rows} == {"rlo_kinds_pl_cg", "rlo_kinds_block_cg", "rlo_kinds_sbd_cg"}
    assert rows[("rlo_kinds_sbd_cg", "-")]["error"] == "called a synchronizing CUDA operation"  # stopped before any kind
    assert (rows[("rlo_kinds_pl_cg", "penalised")]["identical"], rows[("rlo_kinds_pl_cg", "penalised")]["requests"]) == (1, 2)
    # the second request differs at its second token: its logprobs from there on have another context
    assert rows[("rlo_kinds_pl_cg", "logprob")]["logprob_gap"] == pytest.approx(0.004)
    assert rows[("rlo_kinds_pl_cg", "json")]["json_parsed"] == 2
    assert (rows[("rlo_kinds_pl_cg", "sampled")]["served"], rows[("rlo_kinds_pl_cg", "sampled")]["requests"]) == (1, 2)
    assert rows[("rlo_kinds_pl_cg", "sampled")]["identical"] is None
    assert rows[("rlo_kinds_block_cg", "json")]["error"] == "ValueError: refused"
    assert rows[("rlo_kinds_block_cg", "logprob")]["logprob_gap"] == 0.0
    table = compare.kinds_markdown(records, "rlo")
    assert "| rlo_kinds_pl_cg | logprob | 1/2 | 0.004 | - | - | - |" in table
    assert "| rlo_kinds_block_cg | json | - | - | - | - | ValueError: refused |" in table


KIND_COLUMNS = ("penalised", "min_new_tokens", "logprob", "json", "regex", "sampled")
KINDS_NAMES = {"rlo_kinds_pl_cg": "PROMPT_LOOKUP", "rlo_kinds_block_cg": "DFLASH_BLOCK", "rlo_kinds_sbd_cg": "SBD"}


def test_every_plugin_engine_served_every_request_kind_on_the_gpu():
    """Call 5 (after the blocking copy's fix): PROMPT_LOOKUP, DFLASH_BLOCK and SBD, overlapped, served every kind
    with nothing failing, every sampled request to its length; the README's table is compare.py's rows."""
    records = compare.load(COMMITTED)
    rows = {(r["engine"], r["kind"]): r for r in compare.kinds_rows(records, "rlo")}
    readme = (COMMITTED / "README.md").read_text()
    for label, name in KINDS_NAMES.items():
        assert records[label]["ok"] and records[label]["overlap"] is True, label
        found = [rows[(label, kind)] for kind in KIND_COLUMNS]
        assert all(r["error"] is None for r in found), label
        assert found[-1]["served"] == found[-1]["requests"] == 4
        cells = [f"{r['identical']}/{r['requests']}" for r in found[:-1]]
        cells[2] += f" ({found[2]['logprob_gap']:.2g})"
        cells[3] += f" ({found[3]['json_parsed']})"
        assert f"| {name} | " + " | ".join(cells + ["4/4"]) + " |" in readme, name
    plugin_outputs = [records[label]["kinds"] for label in ("rlo_kinds_pl_cg", "rlo_kinds_block_cg")]
    assert all(plugin_outputs[0][k]["output_ids"] == plugin_outputs[1][k]["output_ids"] for k in KIND_COLUMNS[:-1])


CALL6 = COMMITTED / "call6_prompt_lookup"


def _per_step(cell: dict) -> float:
    return sum(cell["completion_tokens"]) / sum(cell["spec_verify_ct"])


def test_the_prompt_lookup_call_reads_back_and_ngram_drafted_from_its_own_earlier_outputs():
    """Call 6: its README holds compare.py's tables; NGRAM's committed tokens per verify step jumped from the
    untimed pass to the timed rounds (its corpus kept the same prompts' outputs), PROMPT_LOOKUP's did not."""
    records = compare.load(CALL6)
    readme = (CALL6 / "README.md").read_text()
    assert compare.real_markdown(records, "rlo") in readme
    ngram, lookup = records["rlo_ngram_cg"], records["rlo_pl_w4_cg"]
    for first, timed in zip(lookup["runs"], lookup["timing"]):
        assert _per_step(first) == pytest.approx(_per_step(timed))
    first, timed = ngram["runs"][0], ngram["timing"][0]
    assert (first["batch"], first["prompts"]) == (timed["batch"], timed["prompts"]) == (1, "completion")
    assert _per_step(timed) > 4 * _per_step(first)
    row = f"| 1, completion (the first cell of the untimed pass: nothing served before) | {_per_step(first):.2f} / " \
          f"{_per_step(timed):.2f} | {_per_step(lookup['runs'][0]):.2f} / {_per_step(lookup['timing'][0]):.2f} |"
    assert row in readme


CALL7 = COMMITTED / "call7_sampled"


def test_the_sampled_call_reads_back():
    """Call 7: its README holds compare.py's tables and the steps' milliseconds from the engines' own logs, and
    the ratios it quotes (DFLASH_BLOCK 0.48-0.62x native DFLASH, sampled; 6.3 against 3.7 ms a step at one request)."""
    records = compare.load(CALL7)
    readme = (CALL7 / "README.md").read_text()
    assert compare.real_markdown(records, "rso") in readme
    assert compare.step_ms_markdown(CALL7, "rso") in readme
    ratios = [bar["ratio"] for bar in compare.real_bars(records, "rso") if bar["bar"] == "DFLASH_BLOCK / native DFLASH"]
    assert len(ratios) == 8 and (round(min(ratios), 2), round(max(ratios), 2)) == (0.48, 0.62)
    assert "**DFLASH_BLOCK sampled is 0.48-0.62x native DFLASH**" in readme
    with tarfile.open(CALL7 / "logs.tar.xz") as logs:
        ms = {Path(m.name).stem: compare.step_ms(logs.extractfile(m).read().decode()) for m in logs.getmembers()
              if m.isfile()}
    assert (round(ms["rso_block_cg"][1], 1), round(ms["rso_native_cg"][1], 1)) == (6.3, 3.7)


def test_step_ms_reads_sglang_s_decode_lines():
    """Milliseconds a step: 1000 / (tokens/s / accept length / running requests), the median of 3 or more lines;
    a line without an accept length (plain decoding) counts one token a step; slow windows are left out."""
    line = ("[2026-12-07 16:37:45] Decode batch, #running-req: {n}, #token: 279, token usage: 0.00, {accept}"
            "cuda graph: True, gen throughput (token/s): {tps}, #queue-req: 0")
    log = "\n".join([line.format(n=2, accept="accept len: 4.00, accept rate: 0.2, ", tps=tps) for tps in (800, 1600, 400)]
                    + [line.format(n=8, accept="", tps=tps) for tps in (4000, 4000, 4000, 50)]
                    + [line.format(n=16, accept="", tps=9000)])
    assert compare.step_ms(log) == {2: 10.0, 8: 2.0}  # 800 tok/s / 4 / 2 = 100 steps/s; 16: one line only


CALL8 = COMMITTED / "call8_profile"


def test_the_profiled_call_reads_back():
    """Call 8: the untimed pass's cells and the profiled step times its README quotes, from the committed records
    and trace_steps.py's reading of the traces (steps.txt)."""
    readme = (CALL8 / "README.md").read_text()
    cells = {}
    for line in (CALL8 / "engines_real.jsonl").read_text().splitlines():
        record = json.loads(line)
        for run in record.get("runs", []):
            cells[record["label"].split("_")[1], run["batch"], run["prompts"]] = run["seconds"]
    assert all(("block",) + key[1:] in cells for key in cells if key[0] == "native")
    same = [(cells["block", b, "edit"], cells["native", b, "edit"]) for b in (1, 8)]
    assert "(0.365 / 0.363 s, 0.406 / 0.394 s)" in readme and same == [(0.3645, 0.3626), (0.4059, 0.3939)]
    slower = [round(cells["block", b, "completion"] / cells["native", b, "completion"], 1) for b in (8, 32, 64)]
    assert slower == [2.2, 1.7, 1.4] and "took DFLASH_BLOCK 2.2x (8 requests), 1.7x (32) and 1.4x (64)" in readme
    assert round(cells["block", 64, "edit"] / cells["native", 64, "edit"], 1) == 1.4
    assert round(cells["block", 1, "completion"]) == 72 and round(cells["block", 32, "edit"]) == 7
    found = re.findall(r"== pso_(\w+?)_cg_b(\d+)\.trace\.json\.gz: \d+ steps, ([\d.]+) ms a step", (CALL8 / "steps.txt").read_text())
    ms = {(engine, int(batch)): float(step) for engine, batch, step in found}
    assert (round(ms["block", 1], 1), round(ms["native", 1], 1), round(ms["block", 32], 1),
                      round(ms["native", 32], 1)) == (9.1, 7.7, 11.5, 10.5)
    assert "9.1 against 7.7 ms a step at 1\n  request, 11.5 against 10.5 at 32" in readme
