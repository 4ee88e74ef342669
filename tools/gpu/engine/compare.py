"""Read the engine results (``engines*.jsonl``) and say what they show; runs on any machine.

usage: python3 compare.py RESULTS_DIR [--divergences OUT.json] [--markdown]

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
  ``PREFIX_part_*`` (a verify width below the block) against ``PREFIX_block_*`` likewise.
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


def divergences(records: Dict[str, dict]) -> List[dict]:
    """Every request whose speculative output differs from the plain engine's: the
    prompt and common prefix, and both next tokens (the input of ``margins.py``)."""
    from engine_check import prompts  # the same prompts the engines were given

    out = []
    for label, record in records.items():
        base = records.get(baseline_of(label) or "")
        if base is None:
            continue
        plain = {(r["batch"], r["prompts"]): r["output_ids"] for r in base.get("runs", [])}
        for run in record.get("runs", []):
            batch = prompts(run["prompts"], run["batch"], seed=run["batch"])
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
    block against the full block (``_part_`` / ``_block_``), same prefix and graph setting."""
    out = []
    for label, record in records.items():
        for mine, theirs in (("_block_", "_native_"), ("_part_", "_block_")):
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("results", type=Path)
    parser.add_argument("--divergences", type=Path)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    records = load(args.results)
    if args.divergences:
        found = divergences(records)
        args.divergences.write_text(json.dumps(found))
        print(f"{len(found)} diverging requests -> {args.divergences}")
    summary = summarize(records)
    summary["margins"] = margins(args.results)
    summary["agreement"] = agreement(records)
    summary["native"] = against_native(records)
    print(markdown(summary) if args.markdown else json.dumps(summary, indent=1))
