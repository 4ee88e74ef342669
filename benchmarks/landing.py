"""The headline tables of benchmarks/README.md, generated from the committed results (no GPU, no SGLang).

    python3 benchmarks/landing.py            # rewrite the generated blocks of benchmarks/README.md
    python3 benchmarks/landing.py --check    # exit 1 naming each block that differs from the results

Each block lies between ``<!-- landing:NAME -->`` and ``<!-- /landing:NAME -->`` and is written by the function
:data:`BLOCKS` names, from the runs :data:`CURRENT` names: for each question, the run that answers it now
(``benchmarks/results/HISTORY.md`` says why, run by run). A row no committed run fills yet is one of
:data:`NOT_YET`'s and reads "not yet measured". To put a new run on the page: commit its result file, name it in
``CURRENT`` (a DFLASH run with a trained draft is one more ``(file, draft)`` of ``CURRENT["dflash"]``) and drop the
``NOT_YET`` row it fills, add the run's note to HISTORY.md and its anchor to :data:`HISTORY`, then run this script and
``benchmarks/plots.py``. Which engines SGLang's overlap scheduler served is read off each record
(``e2e_speculative.overlap_schedule``), so a run with it on says so by itself. ``tests/test_benchmark_tables.py`` fails while a block is stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "benchmarks" / "README.md"
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tools" / "gpu" / "engine")]

import adaptive_width  # noqa: E402
import compare  # noqa: E402
import e2e_speculative as e2e  # noqa: E402

CURRENT: Dict[str, Any] = {
    "layer_step": "benchmarks/results/layer_step_h200_0.5.23.json",
    "verify_step": "benchmarks/results/adaptive_width_h200_0.5.23.json",
    # the controlled-acceptance run whose host was quiet enough to judge 3% (HISTORY.md: later runs were on slower hosts)
    "acceptance": {8: ["benchmarks/results/e2e_speculative_h200_asleep_ndt8.jsonl",
                       "benchmarks/results/e2e_speculative_h200_asleep_references.jsonl",
                       "benchmarks/results/e2e_speculative_h200_asleep_sync.jsonl"],
                   16: ["benchmarks/results/e2e_speculative_h200_asleep_ndt16.jsonl",
                        "benchmarks/results/e2e_speculative_h200_asleep_ndt8.jsonl",
                        "benchmarks/results/e2e_speculative_h200_asleep_references.jsonl",
                        "benchmarks/results/e2e_speculative_h200_asleep_sync.jsonl"]},
    "dflash": [("benchmarks/results/e2e_speculative_h200_together_rerun.jsonl", "dummy weights")],
    # both with SGLang's overlap scheduler, each group with a plain_sync control (issue 48)
    "dflash_overlap": "benchmarks/results/e2e_speculative_h100_overlap.jsonl",
    # W = 4 ran only before DFLASH_BLOCK's masked write went (HISTORY.md)
    "dflash_w4": "benchmarks/results/e2e_speculative_h200_together.jsonl",
    "prompt_lookup": ("tools/gpu/results/engine", "2026-12-01"),  # its records carry no date: its README's
    "startup": "benchmarks/results/startup.json",
    "startup_host": "benchmarks/results/startup_gpu_host.json",  # the same benchmark on the GPU host (--host)
    # the target and DFlash draft trained on the device from the Python standard library (issue 46)
    "real": ("tools/gpu/results/real", {"rlo": "greedy", "rso": "sampled (temperature 0.7, top-p 0.9)"}),
}
"""The result files each block reads, relative to the repository root."""

NOT_YET: Dict[str, List[str]] = {
    "against_plain": ["8B shape, overlap on"],
    "by_acceptance": ["overlap on; a trained target"],
}
"""Rows of each block that no committed run fills yet."""

HISTORY: Dict[str, str] = {
    "benchmarks/results/layer_step_h200_0.5.23.json": "2026-11-30-sglang-0521-and-0523-on-an-h200",
    "benchmarks/results/adaptive_width_h200_0.5.23.json": "2026-12-01-32-layers-and-the-lm-head-on-an-h200",
    "benchmarks/results/e2e_speculative_h200_asleep_ndt8.jsonl": "2026-12-03-later-idle-engines-asleep",
    "benchmarks/results/e2e_speculative_h200_asleep_ndt16.jsonl": "2026-12-03-later-idle-engines-asleep",
    "benchmarks/results/e2e_speculative_h200_together_rerun.jsonl":
        "2026-12-02-the-next-session-rerun-after-two-host-waits-were-removed",
    "benchmarks/results/startup.json": "start-up-startuppy",
    "benchmarks/results/e2e_speculative_h100_overlap.jsonl":
        "2026-12-07-overlap-on-dflash_block-and-native-dflash",
    "tools/gpu/results/real": "2026-12-06-a-target-and-draft-trained-on-the-h100-every-drafter-with-overlap-on",
}
"""The note in results/HISTORY.md (its heading's anchor) of each result file a block links."""

BUDGET_MS = 50
"""Issue 47's start-up budget: what the loader may add to one process with 10 plugins."""


def _path(relative: str) -> Path:
    return ROOT / relative


def _link(relative: str, text: Optional[str] = None) -> str:
    """A link from benchmarks/README.md to a file of the repository."""
    target = Path(relative)
    href = str(target.relative_to("benchmarks")) if target.parts[0] == "benchmarks" else f"../{relative}"
    return f"[{text or target.name}]({href})"


def _json(relative: str) -> Dict[str, Any]:
    return json.loads(_path(relative).read_text())


def _span(values: Iterable[float], fmt: str = "{:.2f}") -> str:
    """``low-high`` of ``values`` as ``fmt`` writes them (one figure where both read the same)."""
    values = list(values)
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}-{high}"


def _rows(head: List[str], rows: List[List[str]]) -> List[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(row) + " |" for row in rows]


def _not_yet(name: str, width: int) -> List[List[str]]:
    return [[what, "not yet measured"] + [""] * (width - 2) for what in NOT_YET.get(name, [])]


def _records(paths: List[str]) -> List[Dict[str, Any]]:
    """The records of the first file and, of each engine it lacks, the first later file's (``tables --with``)."""
    first, *others = [e2e.read_results(_path(p)) for p in paths]
    return e2e.with_others(first, others)


def _run_of(records: List[Dict[str, Any]]) -> str:
    """Device, SGLang release and date(s) of a run's finished records."""
    ok = [r for r in records if r.get("ok")]
    dates = sorted({r["date"] for r in ok})
    return f"{ok[0]['device']}, SGLang {ok[0]['sglang']}, {' and '.join(dates)}"


def _rounds(records: List[Dict[str, Any]]) -> str:
    """How each cell of a run was timed: ``median of N rounds`` (the fewest any engine ran), or one timed run."""
    fewest = min(len(r.get("rounds") or [r["cells"]]) for r in records if r.get("ok"))
    return f"median of {fewest} rounds" if fewest > 1 else "one timed run"


def _overlap(records: List[Dict[str, Any]], names: Dict[str, str]) -> str:
    """Which of ``names``'s engines SGLang's overlap scheduler served (:func:`e2e_speculative.overlap_schedule`)."""
    ran = {r["label"]: r for r in records if r.get("ok") and r["label"] in names}
    on = [names[label] for label in names if label in ran and e2e.overlap_schedule(ran[label])]
    off = [names[label] for label in names if label in ran and not e2e.overlap_schedule(ran[label])]
    if not on:
        return f"the overlap scheduler off for all {len(off)} engines"
    if not off:
        return f"overlap scheduler on: {', '.join(on)}"
    listed = ", ".join(off) if len(off) <= 3 else f"the other {len(off)} engines"
    return f"overlap scheduler on: {', '.join(on)}; off: {listed}"


def _history(path: str) -> str:
    if path not in HISTORY:
        raise SystemExit(f"benchmarks/landing.py: {path} has no note in HISTORY: add its heading's anchor there")
    return f"[history](results/HISTORY.md#{HISTORY[path]})"


def _acceptance_rows(ndt: int) -> List[Dict[str, Any]]:
    return e2e.bar_cells(_records(CURRENT["acceptance"][ndt]), ndt)


def _by_cell(rows: List[Dict[str, Any]]) -> Dict[tuple, Dict[str, Any]]:
    return {(row["batch"], row["acceptance"]): row for row in rows}


# -- what a smaller verify width is worth ----------------------------------------------------------------------


def _layer_cells() -> Dict[tuple, Dict[str, Any]]:
    """``{(backend, kind, batch, context, width): cell}`` of the layer step's cells that ran."""
    return {(c["backend"], c["kind"], c["bs"], c["ctx"], c["width"]): c for c in _json(CURRENT["layer_step"])["cells"]
            if "error" not in c}


def _layer_gains() -> Dict[int, Dict[int, List[float]]]:
    """``{batch: {k: [width 16's step ÷ width k's, one per context]}}`` of the layer step on trtllm_mha."""
    cells, gains = _layer_cells(), {}
    for (backend, kind, bs, ctx, k), cell in cells.items():
        full = cells.get((backend, "full", bs, ctx, 16))
        if backend == "trtllm_mha" and kind == "plugin" and full:
            gains.setdefault(bs, {}).setdefault(k, []).append(full["step_ms"] / cell["step_ms"])
    return gains


def _plugin_over_native() -> List[float]:
    """trtllm_mha's layer step of a plugin width k at ndt 16 ÷ SGLang built for ndt = k, every cell."""
    cells = _layer_cells()
    return [c["step_ms"] / cells[(b, "native", *rest)]["step_ms"] for (b, kind, *rest), c in cells.items()
            if b == "trtllm_mha" and kind == "plugin" and (b, "native", *rest) in cells]


def _over_width16(row: Dict[str, Any]) -> float:
    """A cell's best static width's tokens/s ÷ static width 16's."""
    return row["tokens_per_s"][e2e.static_label(row["best_width"])] / row["tokens_per_s"][e2e.static_label(16)]


def _best_width(row: Dict[str, Any]) -> str:
    return f"{row['best_width']} ({_over_width16(row):.2f})"


def width_worth() -> str:
    layer, grid = _json(CURRENT["layer_step"]), _json(CURRENT["verify_step"])
    gains, e2e_rows = _layer_gains(), _by_cell(_acceptance_rows(16))
    records = _records(CURRENT["acceptance"][16])
    statics = {e2e.static_label(w): f"static {w}" for w in (2, 4, 8, 16)}
    rows = []
    for b in sorted({*gains, *map(int, grid["grid_step_ms"]), *e2e.BATCHES}):
        layer_cell = " / ".join(_span(gains[b][k]) for k in sorted(gains[b])) if b in gains else "-"
        step = grid["grid_step_ms"].get(str(b))
        step_cell = " / ".join(f"{step[str(w)]:.2f}" for w in grid["widths"]) if step else "-"
        best = [e2e_rows.get((b, a)) for a in e2e.ACCEPTANCES]
        e2e_cell = " / ".join(_best_width(row) for row in best) if all(best) else "-"
        rows.append([str(b), layer_cell, step_cell, e2e_cell])
    lines = [
        f"- One layer ({_link(CURRENT['layer_step'])}): Llama-3-8B-shaped, TARGET_VERIFY replayed from a CUDA graph "
        f"through SGLang {layer['release']}'s trtllm_mha, ndt 16, contexts 1024 and 4096 (the range); {layer['device']}, "
        f"{layer['date']}; {_history(CURRENT['layer_step'])}. No scheduler runs (overlap does not apply).",
        f"- 32 layers and the LM head ({_link(CURRENT['verify_step'])}): the same backend, context {grid['context']}; "
        f"{grid['device']}, {grid['date']}; {_history(CURRENT['verify_step'])}. No scheduler runs.",
        f"- End to end ({_link(CURRENT['acceptance'][16][0])} and the other asleep files): CONTROLLED_ACCEPTANCE at "
        f"static widths 2-16, Llama-3-8B shape with dummy weights, flashinfer, CUDA graphs, {_rounds(records)}; "
        f"{_run_of(records)}, {_history(CURRENT['acceptance'][16][0])}; {_overlap(records, statics)}.",
        "",
        *_rows(["batch", "one layer: step at width 16 ÷ at width 2 / 4 / 8",
                "32 layers + LM head: step ms at width " + " / ".join(map(str, grid["widths"])),
                "end to end: best static width (its tokens/s ÷ width 16's) at acceptance "
                + " / ".join(map(str, e2e.ACCEPTANCES))], rows),
        "",
        f"A plugin's width k at ndt 16 costs what SGLang built for ndt = k costs: "
        f"{_span(_plugin_over_native())}x on every layer-step cell (trtllm_mha, this package's patches on the path).",
    ]
    return "\n".join(lines)


# -- DFLASH_BLOCK against SGLang's own DFLASH -----------------------------------------------------------------------


NATIVE, BLOCK, BLOCK_W4 = "dflash_native_ndt16", "dflash_block_ndt16", "dflash_block_w4_ndt16"
OVERLAPPED = {label: label.replace("_ndt16", "_ovl_ndt16") for label in (NATIVE, BLOCK, BLOCK_W4)}


def _median_and_range(values: List[float]) -> str:
    return f"{e2e.lower_median(values):.3f} ({_span(values, '{:.3f}')})" if values else "-"


def dflash() -> str:
    names = {"plain": "plain", NATIVE: "native DFLASH", BLOCK: "DFLASH_BLOCK", BLOCK_W4: "DFLASH_BLOCK W = 4"}
    earlier = e2e.read_results(_path(CURRENT["dflash_w4"]))
    w4 = e2e.round_ratios(earlier, BLOCK_W4, BLOCK)
    head = ["draft", "batch", "plain", "native DFLASH", "DFLASH_BLOCK",
            "DFLASH_BLOCK ÷ native: median (range)", f"bar (≥ {e2e.DRAFT_BAR})", "W = 4 ÷ W = 16 ¹"]
    rows, captions = [], []
    for path, draft in CURRENT["dflash"]:
        records = e2e.read_results(_path(path))
        rows += _dflash_rows(draft, e2e.cells(records), ("plain", NATIVE, BLOCK), e2e.round_ratios(records, BLOCK, NATIVE), w4)
        captions.append(f"- {draft} ({_link(path)}): Llama-3-8B shape, two-layer DFlash draft, blocks of 16, W = B, "
                        f"flashinfer, CUDA graphs, resident together, {_rounds(records)}; {_run_of(records)}, "
                        f"{_history(path)}; {_overlap(records, names)}.")
    path = CURRENT["dflash_overlap"]
    records = _latest(e2e.read_results(_path(path)))
    rows += _dflash_rows("overlap", e2e.cells(records), ("plain", OVERLAPPED[NATIVE], OVERLAPPED[BLOCK]),
                         dflash_overlap_ratios(), e2e.group_round_ratios(records, OVERLAPPED[BLOCK_W4], OVERLAPPED[BLOCK]))
    captions.append(f"- overlap ({_link(path)}): the same, a `plain_sync` control per group, {_rounds(records)}; "
                    f"{_run_of(records)}, {_history(path)}; "
                    f"{_overlap(records, {OVERLAPPED[NATIVE]: 'native DFLASH', OVERLAPPED[BLOCK]: 'DFLASH_BLOCK'})}.")
    note = (f"¹ Verifying 4 of the 16 drafted tokens; the first rows' from {_link(CURRENT['dflash_w4'])} "
            f"({_run_of(earlier)}), before a host wait was removed. Dummy weights "
            "accept no draft: this times the machinery; outputs and verify steps equal native DFLASH's "
            "([draft](../tools/gpu/results/draft/README.md)).")
    return "\n".join(captions + ["", *_rows(head, rows + _not_yet("dflash", len(head))), "", note])


def _dflash_rows(draft: str, r: Dict[str, Dict[tuple, float]], labels: tuple, ratios: Dict[int, List[float]],
                 w4: Dict[int, List[float]]) -> List[List[str]]:
    """The ``dflash`` block's rows of one run: tokens/s of ``labels`` (plain, native, DFLASH_BLOCK), the ratios'
    median and range per batch, the bar, W = 4 ÷ W = 16."""
    rows = []
    for b in e2e.DRAFT_BATCHES:
        figures = [r.get(label, {}).get((b, e2e.ACCEPTANCES[0])) for label in labels]
        rows.append([draft, str(b)] + ["-" if v is None else f"{v:.0f}" for v in figures]
                    + [_median_and_range(ratios.get(b, [])), e2e.draft_verdict(ratios.get(b, [])),
                       _median_and_range(w4.get(b, []))])
    return rows


def _latest(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The records a run's tables read: of a group run twice, the later one's (``e2e.group_round_ratios``)."""
    return list({(tuple(r.get("group") or ()), r["label"]): r for r in records}.values())


def dflash_overlap_ratios() -> Dict[int, List[float]]:
    """Per batch, DFLASH_BLOCK ÷ native DFLASH per round, both with SGLang's overlap scheduler."""
    records = e2e.read_results(_path(CURRENT["dflash_overlap"]))
    return e2e.group_round_ratios(records, OVERLAPPED[BLOCK], OVERLAPPED[NATIVE])


# -- plugins against plain decoding and SGLang's NGRAM --------------------------------------------------------------


def _prompt_lookup() -> List[str]:
    folder, date = CURRENT["prompt_lookup"]
    records = compare.load(_path(folder))
    timing = {label: {(t["batch"], t["prompts"]): t["tokens_per_s"] for t in rec.get("timing", [])}
              for label, rec in records.items()}
    head = ["backend", "batch", "PROMPT_LOOKUP width 2 ÷ plain", "PROMPT_LOOKUP width 4 ÷ plain", "NGRAM ÷ plain",
            "PROMPT_LOOKUP width 4 ÷ NGRAM"]
    rows = []
    for prefix, backend in (("fi", "flashinfer"), ("tri", "triton")):
        plain = timing.get(f"{prefix}_base_cg", {})
        for b in sorted({key[0] for key in plain}):
            keys = [key for key in plain if key[0] == b]

            def over(label: str, against: Dict[tuple, float]) -> str:
                mine = timing.get(label, {})
                values = [mine[k] / against[k] for k in keys if k in mine and k in against]
                return _span(values) if values else "-"

            rows.append([backend, str(b), over(f"{prefix}_pl_below_cg", plain), over(f"{prefix}_pl_at_cg", plain),
                         over(f"{prefix}_ngram_cg", plain), over(f"{prefix}_pl_at_cg", timing.get(f"{prefix}_ngram_cg", {}))])
    timed = [rec for label, rec in records.items() if rec.get("timing")]
    on = sorted({rec.get("spec") or "plain" for rec in timed if not rec["engine_kwargs"].get("disable_overlap_schedule")})
    off = sorted({rec.get("spec") or "plain" for rec in timed if rec["engine_kwargs"].get("disable_overlap_schedule")})
    device = _path(folder).joinpath("setup.log").read_text().splitlines()[0].split(": ", 1)[1].split(" (")[0]
    return [f"- PROMPT_LOOKUP (the example, width 2 and 4) and SGLang's NGRAM at ndt 4 on a 44 M-parameter random-weight "
            f"Llama ({_link(folder + '/README.md', 'tools/gpu/results/engine')}): bf16, CUDA graphs, each engine alone, "
            f"one timed batch per cell, repetitive and random prompts (the range); {device}, SGLang "
            f"{timed[0]['sglang']}, {date}; overlap scheduler on: {', '.join(on)}; off: {', '.join(off)}.", "",
            *_rows(head, rows)]


def against_plain() -> str:
    ndt = 16
    rows_of = _by_cell(_acceptance_rows(ndt))
    records = _records(CURRENT["acceptance"][ndt])
    r = e2e.cells(records)
    names = {"plain": "plain", "plain_sync": "plain_sync", f"controller_ndt{ndt}": "the controller"}
    head = ["batch", "plain tokens/s", "plain_sync ÷ plain",
            "controller ÷ plain at acceptance " + " / ".join(map(str, e2e.ACCEPTANCES))]
    rows = []
    for b in e2e.BATCHES:
        plain, sync = r["plain"][(b, e2e.ACCEPTANCES[0])], r.get("plain_sync", {}).get((b, e2e.ACCEPTANCES[0]))
        rows.append([str(b), f"{plain:.0f}", "-" if sync is None else f"{sync / plain:.2f}",
                     " / ".join(f"{rows_of[(b, a)]['vs_plain']:.2f}" for a in e2e.ACCEPTANCES)])
    ngram = [c["committed_per_verify"] for rec in records if rec.get("ok") and rec["label"] == f"ngram_ndt{ndt}"
             for c in rec["cells"]]
    lines = _prompt_lookup() + [
        "",
        f"- The acceptance controller (CONTROLLED_ACCEPTANCE at ndt {ndt}: the target's own greedy "
        f"continuation, each token kept with the cell's acceptance) and plain decoding without overlap (`plain_sync`) "
        f"against plain decoding; Llama-3-8B shape, dummy weights, flashinfer, CUDA graphs, {_rounds(records)} "
        f"({_link(CURRENT['acceptance'][ndt][0])} and the other asleep files); {_run_of(records)}, "
        f"{_history(CURRENT['acceptance'][16][0])}; {_overlap(records, names)}. No NGRAM: it commits "
        f"{_span(ngram, '{:.1f}')} of {ndt} tokens a step on the dummy target's repeating output.",
        "",
        *_rows(head, rows + _not_yet("against_plain", len(head))),
    ]
    return "\n".join(lines)


# -- widths by acceptance against static widths ----------------------------------------------------------------------


def _counted(rows: List[Dict[str, Any]]) -> tuple:
    """Cells meeting the bar, and those meeting it or missing only parts no static width reaches (``*``)."""
    met = sum(row["verdict"] == "met" for row in rows)
    reachable = sum(row["verdict"] == "met" or all(part.endswith("*") for part in row["verdict"].split(": ", 1)[1].split(", "))
                    for row in rows if row["verdict"] != "-")
    return met, reachable


def by_acceptance() -> str:
    ndt8, ndt16 = _acceptance_rows(8), _acceptance_rows(16)
    cells8, cells16 = _by_cell(ndt8), _by_cell(ndt16)
    records = _records(CURRENT["acceptance"][16])
    names = {label: label for label in ("plain", "static2_ndt8", "static4_ndt8", "static8_ndt8", "static16_ndt16",
                                         "by_batch_ndt8", "by_batch_ndt16", "controller_ndt8", "controller_ndt16")}
    head = ["batch", "acceptance", "best static width", "controller ÷ best static: ndt 8 / 16",
            "controller ÷ static ndt: ndt 8 / 16", "widths by batch size ÷ best static: ndt 8 / 16", "bar: ndt 8 / ndt 16"]
    rows = []
    for a in e2e.ACCEPTANCES:
        for b in e2e.BATCHES:
            x, y = cells8[(b, a)], cells16[(b, a)]

            def by_batch(row: Dict[str, Any], ndt: int) -> str:
                value = row["tokens_per_s"][f"by_batch_ndt{ndt}"]
                return f"{value / row['tokens_per_s'][e2e.static_label(row['best_width'])]:.2f}"

            rows.append([str(b), str(a), str(y["best_width"]), f"{x['vs_best']:.2f} / {y['vs_best']:.2f}",
                         f"{x['vs_ndt']:.2f} / {y['vs_ndt']:.2f}", f"{by_batch(x, 8)} / {by_batch(y, 16)}",
                         f"{x['verdict']} / {y['verdict']}"])
    grid = _json(CURRENT["verify_step"])
    reports = grid["report"].values()
    lines = [
        f"- The acceptance controller beside static widths 2-16 and widths by batch size, ndt 8 and 16 ({_link(CURRENT['acceptance'][8][0])} and the other asleep files; {_run_of(records)}, "
        f"{_history(CURRENT['acceptance'][16][0])}); {_overlap(records, names)}. Ratios: against the best static width up to that ndt. "
        f"Issue 23's bar: ≥ {e2e.BAR['vs_best_static']}x the best static, ≥ {e2e.BAR['vs_ndt_where_not_best']}x static "
        f"ndt where ndt is not the best, ≥ {e2e.BAR['vs_plain']}x plain; `*`: no static width reaches that part either.",
        "",
        *_rows(head, rows + _not_yet("by_acceptance", len(head))),
        "",
        f"Bar met in {_counted(ndt8)[0]} of {len(ndt8)} cells at ndt 8 and {_counted(ndt16)[0]} at ndt 16; "
        f"{_counted(ndt8)[1]} and {_counted(ndt16)[1]} counting the cells missed only where no static width reaches it.",
        "",
        f"From the step-time grid ({_link(CURRENT['verify_step'])}, no scheduler), widths by batch size chosen per "
        f"acceptance served {_span(r['adaptive_vs_static16'] for r in reports)}x static 16's accepted tokens/s and "
        f"{_span(r['adaptive_vs_best_static'] for r in reports)}x the best static width's.",
    ]
    return "\n".join(lines)


# -- start-up ---------------------------------------------------------------------------------------------------


def startup() -> str:
    result = _json(CURRENT["startup"])
    summary, machine = result["summary"], result["machine"]
    head = ["process", "SGLang's `load_plugins()` alone", "with this package", f"added by this package (budget {BUDGET_MS} ms)",
            "of which the entry point's call", "patches installed: in the call / at later imports"]
    host = _json(CURRENT["startup_host"])
    rows = []
    for where, of in (("", summary), (", GPU host", host["summary"])):
        for process in ("launcher", "scheduler", "all_targets"):
            s = of[process]
            name = process + where + (f" ({s['backend']})" if s.get("backend") else "")
            rows.append([name, f"{s['sglang_load_plugins_ms']:.1f} ms", f"{s['load_plugins_with_ours_ms']:.1f} ms",
                         f"**{s['added_by_ours_ms']:.1f} ms**", f"{s['our_entry_point_call_ms']:.1f} ms",
                         f"{s['patches_installed_inside_load']} / {s['patches_installed_later']}"])
    kinds = ("warm", "cold", "off")
    check = [["median (range)"] + [f"{summary[f'check_cache_{kind}']['check_ms']:.1f} ms "
                                   f"({_span(summary[f'check_cache_{kind}']['check_ms_range'], '{:.0f}')})" for kind in kinds]]
    load = machine["load_average_1m_at_children"]
    return "\n".join([
        f"- {result['plugins_installed']} plugins, fresh processes, CPU harness (SGLang {machine['sglang']}), "
        f"alternating with SGLang alone, medians of {result['repeat']}; {machine['cores']}-core "
        f"{machine['cpu']}, Python {machine['python']}, 1-minute load {_span(load)}; {result['date'][:10]} "
        f"({_link(CURRENT['startup'])}, {_history(CURRENT['startup'])}). `all_targets` imports every patched module first (the "
        "bound); no serving loop runs. Rows \"GPU host\": `--host` on the GPU machine's own "
        f"SGLang {host['machine']['sglang']} and kernels, medians of {host['repeat']}, {host['machine']['cores']} cores, load "
        f"{_span(host['machine']['load_average_1m_at_children'])}, {host['date'][:10]} ({_link(CURRENT['startup_host'])}).",
        "",
        *_rows(head, rows),
        "",
        *_rows(["start-up check (issue 25's budgets: 100 ms warm, 300 ms cold)"] + [f"cache {kind}" for kind in kinds], check),
    ])


# -- at a glance ------------------------------------------------------------------------------------------------


def glance() -> str:
    gains = _layer_gains()
    ndt8, ndt16 = _acceptance_rows(8), _acceptance_rows(16)
    biggest = max(e2e.BATCHES)
    at_biggest = [row for row in ndt16 if row["batch"] == biggest]
    dflash_path = CURRENT["dflash"][0][0]
    ratios = e2e.round_ratios(e2e.read_results(_path(dflash_path)), BLOCK, NATIVE)
    medians = [e2e.lower_median(v) for v in ratios.values()]
    records = _records(CURRENT["acceptance"][16])
    r = e2e.cells(records)
    sync = [r["plain_sync"][key] / r["plain"][key] for key in r["plain_sync"]]
    by_batch = {b: [row["vs_plain"] for row in ndt16 if row["batch"] == b] for b in (1, biggest)}
    plugins_on = [r["label"] for r in records if r.get("ok") and e2e.spec_of(r["label"])["kind"] in e2e.PLUGIN_KINDS
                  and e2e.overlap_schedule(r)]
    overlapped = (f"{', '.join(plugins_on)} ran with the overlap scheduler on" if plugins_on else
                  "every plugin engine of this run ran without the overlap scheduler")
    start, host = _json(CURRENT["startup"])["summary"], _json(CURRENT["startup_host"])["summary"]
    top = max(gains)
    return "\n".join([
        f"- **[A smaller verify width](#what-a-smaller-verify-width-is-worth)**: at batch {top} a layer step verifying 2 tokens "
        f"is {_span(gains[top][2])}x as fast as verifying 16 (batch 1: {_span(gains[1][2])}x); end to end at batch {biggest} "
        f"the best static width ({' or '.join(sorted({str(row['best_width']) for row in at_biggest}))}) serves "
        f"{_span(_over_width16(row) for row in at_biggest)}x "
        f"width 16's tokens/s (acceptance {min(e2e.ACCEPTANCES)}-{max(e2e.ACCEPTANCES)}).",
        f"- **[DFLASH_BLOCK against native DFLASH](#dflash_block-against-native-dflash)**: {_span(medians, '{:.3f}')}x native's "
        f"tokens/s at batch {min(ratios)}-{max(ratios)} (median of rounds), the same outputs and verify steps; both with "
        f"overlap, {_span((e2e.lower_median(v) for v in dflash_overlap_ratios().values()), '{:.3f}')}x.",
        f"- **[Plugins against plain decoding](#plugins-against-plain-decoding-and-ngram)**: the acceptance controller "
        f"(ndt 16) ran {_span(by_batch[1])}x plain decoding at batch 1 and {_span(by_batch[biggest])}x at batch {biggest} "
        f"(acceptance {min(e2e.ACCEPTANCES)}-{max(e2e.ACCEPTANCES)}); {overlapped}, and SGLang's own decoding without "
        f"it ran {_span(sync)}x plain.",
        f"- **[Widths by acceptance](#widths-by-acceptance-against-static-widths)**: the controller ran "
        f"{_span(row['vs_best'] for row in ndt8 + ndt16)}x the best static width in every cell and up to "
        f"{max(row['vs_ndt'] for row in ndt16):.2f}x static 16; issue 23's bar met in "
        f"{sum(row['verdict'] == 'met' for row in ndt8)} and {sum(row['verdict'] == 'met' for row in ndt16)} of "
        f"{len(ndt8)} cells (ndt 8, 16).",
        f"- **[Start-up](#start-up-startuppy)**: the loader adds {start['launcher']['added_by_ours_ms']:.1f} ms to a "
        f"launcher and {start['scheduler']['added_by_ours_ms']:.1f} ms to a scheduler with 10 plugins (GPU host: "
        f"{host['launcher']['added_by_ours_ms']:.1f}, {host['scheduler']['added_by_ours_ms']:.1f}; budget {BUDGET_MS} "
        f"ms); the start-up check {start['check_cache_warm']['check_ms']:.0f} ms warm, "
        f"{start['check_cache_cold']['check_ms']:.0f} ms cold.",
    ])


# -- every drafter on a model trained from real text ---------------------------------------------------------------

REAL_NAMES = {"base": "plain", "sync": "plain", "ngram": "NGRAM", "pl_w4": "PROMPT_LOOKUP width 4",
              "pl_acc": "PROMPT_LOOKUP by acceptance", "native": "native DFLASH", "block": "DFLASH_BLOCK W = B",
              "part_w4": "DFLASH_BLOCK W = 4"}


def real() -> str:
    folder, prefixes = CURRENT["real"]
    records = compare.load(_path(folder))
    train = _json(folder + "/train.json")
    head = ["requests", "engine", "overlap"] + [f"batch {b}" for b in (1, 8, 32, 64)]
    rows, notes = [], []
    for prefix, kind in prefixes.items():
        cells = compare.real_cells(records, prefix)
        for name in REAL_NAMES:
            mine = [c for c in cells if c["engine"] == name]
            if not mine:
                continue
            by_batch = {}
            for c in mine:
                by_batch.setdefault(c["batch"], []).append(c)
            figures = []
            for b in (1, 8, 32, 64):
                found = by_batch.get(b, [])
                if not found:
                    figures.append("-")
                    continue
                speed = "/".join(f"{c['tokens_per_s']:.0f}" for c in found)
                ratio = "/".join("-" if c["vs_plain"] is None else f"{c['vs_plain']:.2f}" for c in found)
                step = "/".join("-" if c["per_step"] is None else f"{c['per_step']:.1f}" for c in found)
                figures.append(f"{speed} ({ratio}" + ("" if name in ("base", "sync") else f", {step}") + ")")
            rows.append([kind.split(" ")[0], REAL_NAMES[name], "on" if mine[0]["overlap"] else "off"] + figures)
        if prefix == "rlo":
            for name in ("pl_w4", "native", "block"):
                pairs = [(c["identical"], c["requests"]) for c in cells if c["engine"] == name and c["identical"] is not None]
                if pairs:
                    notes.append(f"{REAL_NAMES[name]} {sum(a for a, _ in pairs)}/{sum(n for _, n in pairs)}")
    bars = compare.real_bars(records, "rlo")
    held = train["target"]["held_out"]
    device = train["versions"]["gpu"]
    return "\n".join([
        f"- {_link(folder + '/README.md', folder)}: a 6-layer Llama (hidden 768) and a 2-layer DFlash draft "
        f"(blocks of 16) trained on the device from its Python standard library (held-out perplexity "
        f"{held['perplexity']:.1f}; the draft {train['draft']['acceptance']['all']['tokens_per_step']['16']:.2f} tokens "
        f"per verify step at W = 16); held-out prompts; each cell: tok/s (× plain, tokens/verify step), "
        f"completion/edit; SGLang {records[next(iter(records))]['sglang']}, flashinfer, CUDA graphs, 128 new tokens; "
        f"{device}, 2026-12-06; median of 3 rounds (sampled: 1).",
        f"- Greedy outputs identical to plain: {', '.join(notes)} requests (bf16 near-ties, margins not measured); "
        "DFLASH_BLOCK at W = B: native DFLASH's tokens and verify steps in every request. DFLASH_BLOCK ÷ native (bar "
        f"0.97): {_span(r['ratio'] for r in bars)}, missed in {sum(not r['met'] for r in bars)} of {len(bars)} cells: "
        "the same tokens per step, more host work per step on a tiny model.",
        "", *_rows(head, rows), ""])


BLOCKS: Dict[str, Callable[[], str]] = {
    "glance": glance,
    "width": width_worth,
    "dflash": dflash,
    "against_plain": against_plain,
    "by_acceptance": by_acceptance,
    "real": real,
    "startup": startup,
}
"""Each generated block of the page and the function that writes it."""


def _markers(name: str) -> tuple:
    return f"<!-- landing:{name} (python3 benchmarks/landing.py writes it) -->", f"<!-- /landing:{name} -->"


def page(text: str) -> str:
    """``text`` (the page) with every block of :data:`BLOCKS` written afresh between its markers."""
    for name, block in BLOCKS.items():
        start, end = _markers(name)
        if text.count(start) != 1 or text.count(end) != 1:
            raise SystemExit(f"{PAGE.relative_to(ROOT)}: needs exactly one {start} and one {end}")
        head, rest = text.split(start)
        _, tail = rest.split(end)
        text = f"{head}{start}\n{block()}\n{end}{tail}"
    return text


def stale(path: Path = PAGE) -> List[str]:
    """The blocks whose committed text is not what the committed results give."""
    text, fresh = path.read_text(), page(path.read_text())
    return [name for name in BLOCKS if _block(text, name) != _block(fresh, name)]


def _block(text: str, name: str) -> str:
    start, end = _markers(name)
    return text.split(start)[1].split(end)[0]


def main(argv: List[str]) -> int:
    if argv == ["--check"]:
        found = stale()
        for name in found:
            print(f"{PAGE.relative_to(ROOT)}: block {name} differs from the results: run python3 benchmarks/landing.py")
        return 1 if found else 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    PAGE.write_text(page(PAGE.read_text()))
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
