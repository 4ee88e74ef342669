"""Read the engine results (``engines*.jsonl``) and say what they show; runs on any machine.

usage: python3 compare.py RESULTS_DIR [--divergences OUT.json] [--markdown] [--real PREFIX] [--kinds PREFIX]
                          [--step-ms PREFIX]

* identity: each speculative engine's greedy outputs against the plain engine of the same
  backend and CUDA-graph setting, request by request (and where they first differ);
* acceptance: tokens committed per verify step, ``(completion_tokens - 1) / spec_verify_ct``
  (the first token comes from the prefill);
* speed: tokens per second of the timed batches, and the ratio to the plain engine;
* refusals: an engine the loader stopped, with the loader's message from its log
  (SGLang kills the process group when a scheduler fails, so no result line is written),
  and engines that failed otherwise, with the last exception of their log;
* agreement: engines that differ in one thing (graphs, kernels, precision, width), request by
  request: how much a change of kernel alone moves greedy outputs on this model;
* against native DFLASH: each ``PREFIX_block_*`` engine (the DFLASH_BLOCK example at the full
  block) against ``PREFIX_native_*`` (SGLang's own DFLASH, same draft, same graph setting):
  requests with the same outputs and the same verify steps, and the tokens-per-second ratio;
  ``PREFIX_part_*`` and ``PREFIX_part_wN_*`` (a verify width below the block) against ``PREFIX_block_*``
  likewise;
* ``--real PREFIX`` (``run.sh real``'s engines, ``rl`` greedy, ``rs`` sampled, ``rlo``/``rso`` with the plugin
  engines overlapped): per prompt kind, each engine's tokens per second, its ratio to plain decoding and its
  tokens per verify step at every batch size (the median of the timed rounds, and how far the rounds spread),
  and issue 46's bars cell by cell: DFLASH_BLOCK at W = B against native DFLASH, and the acceptance controller
  against the best static width.
* ``--kinds PREFIX`` (``run.sh real``'s ``kinds_*`` engines): every request kind of each engine against
  ``PREFIX_kinds_base_cg`` (plain decoding without overlap): the requests whose tokens are identical (every kind
  but ``sampled``), the largest logprob difference on the tokens both committed, the JSON requests whose text
  parses, and the sampled requests served in full.
* ``--step-ms PREFIX``: each ``PREFIX_*`` engine's milliseconds per decode step by running requests, from
  SGLang's own ``Decode batch`` log lines (``1000 / (gen throughput / accept len / running requests)``, the median
  of the lines at that count, where at least 3 are), whatever the requests' timing saw.
"""

from __future__ import annotations

import argparse
import json
import re
import tarfile
from pathlib import Path
from typing import Dict, List, Optional


def load(results: Path) -> Dict[str, dict]:
    records = {}
    for path in sorted(results.glob("engines*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            records[record["label"]] = record
    for path in sorted(results.glob("logs*.tar.xz")):
        with tarfile.open(path) as logs:
            for member in logs.getmembers():
                label = Path(member.name).stem
                if label in records and not records[label].get("runs"):
                    text = logs.extractfile(member).read().decode(errors="replace")
                    refusal = re.findall(r"sglang_spec_plugins\.errors\.\w+: (.*)", text)
                    failure = re.findall(r"^(?:\w+\.)*\w*(?:Error|Exception): (.*)", text, re.M)
                    if refusal:
                        records[label]["refusal"] = refusal[-1]
                    elif failure:
                        records[label]["failure"] = failure[-1]
    return records


def baseline_of(label: str) -> Optional[str]:
    """The plain engine a speculative one is compared with: same backend and graph setting."""
    backend, _, rest = label.partition("_")
    if rest.startswith("base"):
        return None
    return f"{backend}_base_{'nocg' if label.endswith('nocg') else 'cg'}"


def first_difference(a: List[int], b: List[int]) -> Optional[int]:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def committed_per_step(run: dict) -> Optional[float]:
    steps = [(c - 1) / v for c, v in zip(run["completion_tokens"], run["spec_verify_ct"]) if v]
    return round(sum(steps) / len(steps), 3) if steps else None


def summarize(records: Dict[str, dict]) -> dict:
    rows = []
    for label, record in records.items():
        base = records.get(baseline_of(label) or "")
        row = {"label": label, "spec": record.get("spec"), "ok": bool(record.get("runs")),
               "refusal": record.get("refusal"), "failure": record.get("failure"), "skipped": record.get("skipped"),
               "sampled_refusal": None, "runs": []}
        if record.get("stage") == "sampled":
            row["sampled_refusal"] = record.get("error")
        plain = {(r["batch"], r["prompts"]): r for r in (base or {}).get("runs", [])}
        for run in record.get("runs", []):
            entry = {"batch": run["batch"], "prompts": run["prompts"], "committed_per_step": committed_per_step(run)}
            other = plain.get((run["batch"], run["prompts"]))
            if other is not None:
                diffs = [first_difference(a, b) for a, b in zip(run["output_ids"], other["output_ids"])]
                entry["identical"] = sum(d is None for d in diffs)
                entry["requests"] = len(diffs)
                entry["first_differences"] = diffs
            row["runs"].append(entry)
        timed = {(t["batch"], t["prompts"]): t for t in (base or {}).get("timing", [])}
        row["timing"] = [
            {"batch": t["batch"], "prompts": t["prompts"], "tokens_per_s": t["tokens_per_s"],
             "vs_plain": (round(t["tokens_per_s"] / timed[(t["batch"], t["prompts"])]["tokens_per_s"], 2)
                          if (t["batch"], t["prompts"]) in timed else None),
             "committed_per_step": committed_per_step(t) if t.get("spec_verify_ct") and t["spec_verify_ct"][0] else None}
            for t in record.get("timing", [])
        ]
        rows.append(row)
    return {"engines": rows}


def divergences(records: Dict[str, dict], results: Optional[Path] = None) -> List[dict]:
    """Every request whose speculative output differs from the plain engine's: the
    prompt and common prefix, and both next tokens (the input of ``margins.py``). An
    engine that read a prompts file (``--prompts``) finds it in ``results``."""
    from engine_check import cell_batches, prompt_file  # the same prompts the engines were given

    out = []
    for label, record in records.items():
        base = records.get(baseline_of(label) or "")
        if base is None:
            continue
        plain = {(r["batch"], r["prompts"]): r["output_ids"] for r in base.get("runs", [])}
        source = prompt_file(results / record["prompts_file"]) if record.get("prompts_file") else None
        for run in record.get("runs", []):
            batches = cell_batches(source, run["prompts"], run["batch"], run["batch"], record.get("min_requests", 1))
            batch = [ids for one in batches for ids in one]
            for i, (mine, theirs) in enumerate(zip(run["output_ids"], plain[(run["batch"], run["prompts"])])):
                at = first_difference(mine, theirs)
                if at is not None:
                    out.append({"label": label, "baseline": baseline_of(label), "batch": run["batch"],
                                "prompts": run["prompts"], "request": i, "position": at,
                                "input_ids": batch[i] + theirs[:at], "speculative": mine[at], "plain": theirs[at]})
    return out


AGREEMENT = [  # pairs of engines that differ in one thing, and what that thing is
    ("fi_base_cg", "fi_base_nocg", "plain flashinfer: CUDA graphs on / off"),
    ("tri_base_cg", "tri_base_nocg", "plain triton: CUDA graphs on / off"),
    ("fi_base_nocg", "tri_base_nocg", "plain decoding: flashinfer / triton"),
    ("fi_base_nocg", "fidet_base_nocg", "plain flashinfer: default / deterministic inference"),
    ("fi16_base_cg", "fi16_base_nocg", "plain flashinfer, float16: CUDA graphs on / off"),
    ("fi_pl_below_cg", "fi_pl_below_nocg", "PROMPT_LOOKUP width 2, flashinfer: CUDA graphs on / off"),
    ("fi_pl_below_cg", "fi_pl_at_cg", "PROMPT_LOOKUP on flashinfer graphs: width 2 / 4"),
    ("fi_pl_below_cg", "fi_ngram_cg", "flashinfer graphs: PROMPT_LOOKUP width 2 / SGLang's NGRAM"),
    ("tri_pl_at_cg", "tri_pl_at_nocg", "PROMPT_LOOKUP width 4, triton: CUDA graphs on / off"),
]


def agreement(records: Dict[str, dict]) -> List[dict]:
    """For each pair of :data:`AGREEMENT` that ran: how many requests gave the same greedy output."""
    out = []
    for a, b, what in AGREEMENT:
        if not (records.get(a, {}).get("runs") and records.get(b, {}).get("runs")):
            continue
        theirs = {(r["batch"], r["prompts"]): r["output_ids"] for r in records[b]["runs"]}
        pairs = [(x, y) for r in records[a]["runs"] for x, y in zip(r["output_ids"], theirs[(r["batch"], r["prompts"])])]
        out.append({"engines": [a, b], "differs_in": what, "identical": sum(x == y for x, y in pairs), "requests": len(pairs)})
    return out


def against_native(records: Dict[str, dict]) -> List[dict]:
    """The DFLASH_BLOCK engines against native DFLASH (``_block_`` / ``_native_``), and below the
    block against the full block (``_part_`` or ``_part_wN_`` / ``_block_``), same prefix and graph setting."""
    out = []
    for label, record in records.items():
        part = re.search(r"_part(_w\d+)?_", label)
        for mine, theirs in (("_block_", "_native_"), (part.group(0) if part else "_part_", "_block_")):
            if mine not in label or not record.get("runs"):
                continue
            other = records.get(label.replace(mine, theirs), {})
            if not other.get("runs"):
                continue
            by_run = {(r["batch"], r["prompts"]): r for r in other["runs"]}
            timed = {(t["batch"], t["prompts"]): t for t in other.get("timing", [])}
            for run in record["runs"]:
                ref = by_run.get((run["batch"], run["prompts"]))
                if ref is None:
                    continue
                t = next((t for t in record.get("timing", []) if (t["batch"], t["prompts"]) == (run["batch"], run["prompts"])), None)
                ref_t = timed.get((run["batch"], run["prompts"]))
                out.append({"engine": label, "against": label.replace(mine, theirs), "batch": run["batch"],
                            "prompts": run["prompts"], "requests": len(run["output_ids"]),
                            "same_outputs": sum(a == b for a, b in zip(run["output_ids"], ref["output_ids"])),
                            "same_verify_steps": sum(a == b for a, b in zip(run["spec_verify_ct"], ref["spec_verify_ct"])),
                            "committed_per_step": committed_per_step(run), "theirs": committed_per_step(ref),
                            "speed_ratio": round(t["tokens_per_s"] / ref_t["tokens_per_s"], 3) if t and ref_t else None})
    return out


REAL_ORDER = ("base", "sync", "ngram", "pl_w2", "pl_w4", "pl_w8", "pl_batch", "pl_acc", "native", "block",
              "part_w4", "part_w8")
"""``run.sh real``'s engines (the label between the prefix and the graph setting), in its order."""
STATIC_WIDTHS = ("pl_w2", "pl_w4", "pl_w8")
BAR = 0.97
"""Issue 46's bars: DFLASH_BLOCK at W = B at least this times native DFLASH's tokens per second, and the
acceptance controller at least this times the best static width's, in every cell."""


def _timed(record: dict) -> Dict[tuple, dict]:
    return {(t["batch"], t["prompts"]): t for t in record.get("timing", [])}


def real_cells(records: Dict[str, dict], prefix: str) -> List[dict]:
    """One row per engine of ``run.sh real`` with ``prefix``, batch size and prompt kind: the median round's
    tokens per second, its ratio to plain decoding's, the rounds' spread ((fastest - slowest) / median), tokens
    per verify step, requests identical to plain decoding (greedy engines only), and the mode the engine ran in."""
    base = records.get(f"{prefix}_base_cg", {})
    plain_t, plain_runs = _timed(base), {(r["batch"], r["prompts"]): r for r in base.get("runs", [])}
    rows = []
    for name in REAL_ORDER:
        record = records.get(f"{prefix}_{name}_cg")
        if record is None:
            continue
        runs = {(r["batch"], r["prompts"]): r for r in record.get("runs", [])}
        for cell, t in _timed(record).items():
            ref, run = plain_t.get(cell), runs.get(cell)
            same = None
            if run is not None and cell in plain_runs and record.get("sampling", "greedy") == "greedy":
                same = sum(a == b for a, b in zip(run["output_ids"], plain_runs[cell]["output_ids"]))
            rounds = t.get("rounds", [t["tokens_per_s"]])
            rows.append({"engine": name, "batch": cell[0], "prompts": cell[1], "tokens_per_s": t["tokens_per_s"],
                         "vs_plain": round(t["tokens_per_s"] / ref["tokens_per_s"], 3) if ref else None,
                         "spread": round((max(rounds) - min(rounds)) / t["tokens_per_s"], 3),
                         "per_step": committed_per_step(t) if record.get("spec") else None,
                         "identical": same, "requests": len(run["output_ids"]) if run else None,
                         "overlap": record.get("overlap"), "sampling": record.get("sampling")})
    return rows


def real_bars(records: Dict[str, dict], prefix: str) -> List[dict]:
    """Issue 46's bars (:data:`BAR`) per batch size and prompt kind, where both sides ran: DFLASH_BLOCK at
    W = B over native DFLASH, and the acceptance controller (``pl_acc``) over the fastest static width."""
    cells = {(r["engine"], r["batch"], r["prompts"]): r for r in real_cells(records, prefix)}
    out = []
    for (engine, batch, kind), row in cells.items():
        if engine == "block" and ("native", batch, kind) in cells:
            ratio = row["tokens_per_s"] / cells[("native", batch, kind)]["tokens_per_s"]
            out.append({"bar": "DFLASH_BLOCK / native DFLASH", "batch": batch, "prompts": kind, "ratio": round(ratio, 3),
                        "met": ratio >= BAR})
        statics = [cells[(w, batch, kind)] for w in STATIC_WIDTHS if (w, batch, kind) in cells]
        if engine == "pl_acc" and statics:
            best = max(statics, key=lambda r: r["tokens_per_s"])
            ratio = row["tokens_per_s"] / best["tokens_per_s"]
            out.append({"bar": f"controller / best static ({best['engine']})", "batch": batch, "prompts": kind,
                        "ratio": round(ratio, 3), "met": ratio >= BAR})
    return out


def real_markdown(records: Dict[str, dict], prefix: str) -> str:
    """:func:`real_cells` as one table per prompt kind (a cell: tok/s, x plain, tokens per verify step), the
    DFLASH_BLOCK engines against native DFLASH and the full block (:func:`against_native`), and :func:`real_bars`."""
    rows = real_cells(records, prefix)
    batches = sorted({r["batch"] for r in rows})
    lines = []
    for kind in sorted({r["prompts"] for r in rows}):
        lines += [f"**{kind}** (tok/s, x plain, tokens per verify step; rounds' spread)", "",
                  "| engine | overlap | " + " | ".join(f"batch {b}" for b in batches) + " | identical to plain |",
                  "|---|---|" + "---|" * len(batches) + "---|"]
        for name in REAL_ORDER:
            mine = {r["batch"]: r for r in rows if r["engine"] == name and r["prompts"] == kind}
            if not mine:
                continue
            cells = []
            for b in batches:
                r = mine.get(b)
                cells.append("-" if r is None else
                             f"{r['tokens_per_s']:.0f}, {r['vs_plain'] if r['vs_plain'] is not None else '-'}x, "
                             f"{r['per_step'] if r['per_step'] is not None else '-'} ({r['spread']:.1%})")
            same = [(r["identical"], r["requests"]) for r in mine.values() if r["identical"] is not None]
            identical = f"{sum(s for s, _ in same)}/{sum(n for _, n in same)}" if same else "-"
            overlap = next(iter(mine.values()))["overlap"]
            lines.append(f"| {name} | {'on' if overlap else 'off' if overlap is not None else '-'} | "
                         + " | ".join(cells) + f" | {identical} |")
        lines.append("")
    native = [n for n in against_native(records) if n["engine"].startswith(f"{prefix}_")]
    if native:
        lines += ["| engine | against | batch | prompts | same outputs | same verify steps | tokens / verify step (theirs) |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {n['engine']} | {n['against']} | {n['batch']} | {n['prompts']} | {n['same_outputs']}/{n['requests']} | "
                  f"{n['same_verify_steps']}/{n['requests']} | {n['committed_per_step']} ({n['theirs']}) |" for n in native]
        lines.append("")
    bars = real_bars(records, prefix)
    if bars:
        lines += ["| bar | batch | prompts | ratio | met |", "|---|---|---|---|---|"]
        lines += [f"| {b['bar']} | {b['batch']} | {b['prompts']} | {b['ratio']} | {'yes' if b['met'] else 'no'} |"
                  for b in bars]
    return "\n".join(lines)


def kinds_rows(records: Dict[str, dict], prefix: str) -> List[dict]:
    """One row per ``kinds_*`` engine (but the base) and request kind: ``identical`` requests out of ``requests``
    (None for ``sampled``: its tokens are drawn), ``logprob_gap`` (the largest logprob difference over the tokens
    both engines committed before their outputs first differ, ``logprob`` only), ``json_parsed`` (texts that parse
    as a JSON object, ``json`` only), ``served`` (requests that ran to their length, ``sampled`` only) and
    ``error`` (the kind failed); an engine that stopped before any kind ran, one row of kind ``-`` whose ``error`` is
    its log's last error line."""
    base = records.get(f"{prefix}_kinds_base_cg", {}).get("kinds", {})
    rows = []
    for label, record in records.items():
        if not label.startswith(f"{prefix}_kinds_") or label == f"{prefix}_kinds_base_cg":
            continue
        if "kinds" not in record:
            rows.append({"engine": label, "kind": "-", "error": record.get("refusal") or record.get("failure")
                         or record.get("error", "no kind ran"), "identical": None, "requests": None,
                         "logprob_gap": None, "json_parsed": None, "served": None})
            continue
        for kind, found in record["kinds"].items():
            row = {"engine": label, "kind": kind, "error": found.get("error"), "identical": None, "requests": None,
                   "logprob_gap": None, "json_parsed": None, "served": None}
            theirs = base.get(kind, {})
            if row["error"] is None and kind != "sampled" and "output_ids" in theirs:
                pairs = list(zip(found["output_ids"], theirs["output_ids"]))
                row["identical"], row["requests"] = sum(a == b for a, b in pairs), len(pairs)
            if row["error"] is None and kind == "logprob" and "logprobs" in theirs:
                gaps = [abs(x - y) for mine, other, (a, b) in zip(found["logprobs"], theirs["logprobs"], pairs)
                        for x, y in list(zip(mine, other))[:_common_prefix(a, b)]]
                row["logprob_gap"] = max(gaps) if gaps else None
            if row["error"] is None and kind == "json":
                row["json_parsed"] = sum(_parses(text) for text in found.get("text", []))
            if row["error"] is None and kind == "sampled":
                row["served"] = sum("length" in finish for finish in found["finish"])
                row["requests"] = len(found["output_ids"])
            rows.append(row)
    return rows


def _common_prefix(a: List[int], b: List[int]) -> int:
    """How many tokens ``a`` and ``b`` share before they first differ (a logprob after that has another context)."""
    first = first_difference(a, b)
    return min(len(a), len(b)) if first is None else first


def _parses(text: Optional[str]) -> bool:
    try:
        return isinstance(json.loads(text or ""), dict)
    except ValueError:
        return False


def kinds_markdown(records: Dict[str, dict], prefix: str) -> str:
    """:func:`kinds_rows` as a table."""
    lines = ["| engine | kind | identical to plain | largest logprob gap | JSON parsed | sampled served | error |",
             "|---|---|---|---|---|---|---|"]
    for r in kinds_rows(records, prefix):
        same = f"{r['identical']}/{r['requests']}" if r["identical"] is not None else "-"
        gap = f"{r['logprob_gap']:.2g}" if r["logprob_gap"] is not None else "-"
        served = f"{r['served']}/{r['requests']}" if r["served"] is not None else "-"
        lines.append(f"| {r['engine']} | {r['kind']} | {same} | {gap} | {r['json_parsed'] if r['json_parsed'] is not None else '-'} "
                     f"| {served} | {r['error'] or '-'} |")
    return "\n".join(lines)


def margins(results: Path) -> Optional[dict]:
    """What ``margins.py`` measured: per engine, how many divergences were near-ties
    (the two chosen tokens among the plain engine's top two, or tied with its top)."""
    path = results / "margins.jsonl"
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    out = {}
    for row in rows:
        entry = out.setdefault(row["label"], {"divergences": 0, "chosen_are_top2": 0, "max_margin": 0.0})
        entry["divergences"] += 1
        entry["chosen_are_top2"] += row["chosen_are_top2"]
        entry["max_margin"] = max(entry["max_margin"], round(row["margin"], 4))
    return out


def markdown(summary: dict) -> str:
    lines = ["| engine | batch | prompts | identical to plain | tokens / verify step | tok/s | vs plain |",
             "|---|---|---|---|---|---|---|"]
    for row in summary["engines"]:
        timing = {(t["batch"], t["prompts"]): t for t in row["timing"]}
        for run in row["runs"]:
            t = timing.get((run["batch"], run["prompts"]), {})
            same = f"{run['identical']}/{run['requests']}" if "identical" in run else "-"
            lines.append(f"| {row['label']} | {run['batch']} | {run['prompts']} | {same} | "
                         f"{run['committed_per_step'] or '-'} | {t.get('tokens_per_s', '-')} | {t.get('vs_plain') or '-'} |")
        if row["refusal"]:
            lines.append(f"| {row['label']} | refused at start-up: {row['refusal']} |||||")
        elif row["failure"]:
            lines.append(f"| {row['label']} | failed: {row['failure']} |||||")
        elif not row["ok"]:
            lines.append(f"| {row['label']} | not run: {row['skipped']} |||||")
    if summary.get("agreement"):
        lines += ["", "| engines | they differ in | identical requests |", "|---|---|---|"]
        lines += [f"| {' / '.join(a['engines'])} | {a['differs_in']} | {a['identical']}/{a['requests']} |"
                  for a in summary["agreement"]]
    if summary.get("native"):
        lines += ["", "| engine | against | batch | prompts | same outputs | same verify steps | tokens / verify step (theirs) | tok/s ratio |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {n['engine']} | {n['against']} | {n['batch']} | {n['prompts']} | {n['same_outputs']}/{n['requests']} | "
                  f"{n['same_verify_steps']}/{n['requests']} | {n['committed_per_step']} ({n['theirs']}) | {n['speed_ratio'] or '-'} |"
                  for n in summary["native"]]
    if summary.get("margins"):
        lines += ["", "| engine | diverging requests measured | the two chosen tokens are the plain engine's top two | largest top-1 minus top-2 log-probability |",
                  "|---|---|---|---|"]
        lines += [f"| {label} | {m['divergences']} | {m['chosen_are_top2']} | {m['max_margin']} |"
                  for label, m in summary["margins"].items()]
    return "\n".join(lines)


DECODE_LINE = re.compile(r"Decode batch, #running-req: (\d+),.*?(?:accept len: ([\d.]+),.*?)?"
                         r"gen throughput \(token/s\): ([\d.]+)")


def step_ms(log: str, least: int = 3) -> Dict[int, float]:
    """Milliseconds per decode step by running requests, from SGLang's ``Decode batch`` lines of ``log`` (the
    median where ``least`` lines or more report that count; a line's window under 100 tokens/s, an engine's
    first steps and idle waits, left out). A line's throughput counts every second since the line before it,
    40 decode steps back, prefills and the gaps between requests included: each figure is a bound on a step's
    time, not the step's time (``trace_steps.py`` gives that)."""
    found: Dict[int, List[float]] = {}
    for running, accept, throughput in DECODE_LINE.findall(log):
        if float(throughput) >= 100:
            steps_per_s = float(throughput) / float(accept or 1) / int(running)
            found.setdefault(int(running), []).append(1000 / steps_per_s)
    return {n: sorted(v)[len(v) // 2] for n, v in sorted(found.items()) if len(v) >= least}


def step_ms_markdown(results: Path, prefix: str) -> str:
    """:func:`step_ms` of every ``PREFIX_*`` engine log in ``results``' ``logs*.tar.xz``, one line each."""
    lines = []
    for path in sorted(results.glob("logs*.tar.xz")):
        with tarfile.open(path) as logs:
            for member in sorted(logs.getmembers(), key=lambda m: m.name):
                label = Path(member.name).stem
                if member.isfile() and label.startswith(prefix + "_"):
                    found = step_ms(logs.extractfile(member).read().decode(errors="replace"))
                    lines.append(f"| {label} | " + ", ".join(f"{n}: {ms:.2f}" for n, ms in found.items()) + " |")
    return "\n".join(["| engine | ms per decode step at N running requests (N: ms) |", "|---|---|", *lines])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("results", type=Path)
    parser.add_argument("--divergences", type=Path)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--real", metavar="PREFIX", help="run.sh real's tables for this label prefix (rl, rs, rlo, rso)")
    parser.add_argument("--kinds", metavar="PREFIX", help="run.sh real's kinds_* engines against kinds_base (rl, rlo)")
    parser.add_argument("--step-ms", metavar="PREFIX", help="ms per decode step of PREFIX_* engines, from their logs")
    args = parser.parse_args()
    if args.step_ms:
        print(step_ms_markdown(args.results, args.step_ms))
        raise SystemExit(0)
    records = load(args.results)
    if args.kinds:
        print(kinds_markdown(records, args.kinds))
        raise SystemExit(0)
    if args.real:
        print(real_markdown(records, args.real))
        raise SystemExit(0)
    if args.divergences:
        found = divergences(records, args.results)
        args.divergences.write_text(json.dumps(found))
        print(f"{len(found)} diverging requests -> {args.divergences}")
    summary = summarize(records)
    summary["margins"] = margins(args.results)
    summary["agreement"] = agreement(records)
    summary["native"] = against_native(records)
    print(markdown(summary) if args.markdown else json.dumps(summary, indent=1))
