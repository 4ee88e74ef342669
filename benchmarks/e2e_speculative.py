"""End-to-end speculative decoding on one H200, acceptance set rather than lucky: tokens per second of plain
decoding, static widths 2/4/8/16, widths by batch size, the acceptance controller (widths by acceptance) and
SGLang's NGRAM, at speculative_num_draft_tokens 8 and 16, batches of 1, 8, 32, 64 and 128, acceptance 0.5/0.7/0.9.

The target is Llama-3-8B-shaped (32 layers, hidden 4096, vocabulary 128256) with ``--load-format dummy``
(random weights, nothing downloaded), served by SGLang's ``Engine`` on flashinfer with CUDA graphs (decode
graphs at the batch sizes measured). Every speculative engine but NGRAM runs the CONTROLLED_ACCEPTANCE example
drafter (``examples/controlled_acceptance_drafter``): it drafts the target's own greedy continuation, recorded
by the plain engine, each token kept with the cell's acceptance (sent per request as
``custom_params["acceptance"]``), so the acceptance is a parameter of the cell and the same at every width.
Each cell runs its requests once untimed (kernels warm; 16 tokens, or the cell's 128 where the controller
settles) and once timed.

    python3 benchmarks/e2e_speculative.py run --out OUT [--state DIR] [--deadline S] [--only LABEL,...]
    python3 benchmarks/e2e_speculative.py tables RESULTS.jsonl           (anywhere: the README tables)

``run`` starts each engine not yet in the results in its own process (one engine = one server: start,
capture, every cell, shut down), until ``--deadline`` seconds from its start leave no time for the next;
``--state DIR`` holds the results (and the recorded continuations) of earlier calls, copied into ``OUT`` first,
so that calls of under 9 minutes each complete the set. See ``benchmarks/README.md`` for the H200 commands.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

BATCHES = (1, 8, 32, 64, 128)
ACCEPTANCES = (0.5, 0.7, 0.9)
NDTS = (8, 16)
NEW_TOKENS = 128
RECORDED = NEW_TOKENS + 16  # the record reaches past a request's last verify of the widest chain
PROMPT_LEN = 64
VOCAB = 128256
LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=128, vocab_size=VOCAB, max_position_embeddings=8192,
                 rope_theta=500000.0, rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001,
                 tie_word_embeddings=False)
MODEL = Path(os.environ.get("E2E_MODEL", "/tmp/llama3-8b-shape"))
RESULTS = "e2e_speculative.jsonl"
CONTINUATIONS = "continuations.json"

BY_BATCH = {8: {1: 8, 8: 8, 32: 4, 64: 2}, 16: {1: 16, 8: 8, 32: 4, 64: 2}}
"""Widths by batch size as an operator writes them without knowing acceptance: wide for few requests."""
CANDIDATES = {
    8: {1: [2, 4, 8], 8: [1, 2, 4, 8], 32: [1, 2, 4, 8], 64: [1, 2, 4, 8], 128: [1, 2, 4, 8]},
    16: {1: [2, 4, 8, 16], 8: [1, 2, 4, 8, 16], 32: [1, 2, 4, 8], 64: [1, 2, 4, 8], 128: [1, 2, 4, 8]},
}
"""The acceptance controller's candidates per batch-size slot (each is a CUDA graph per captured size). The
run of 2026-12-02 offered only [1, 2, 4] from 64 requests (each record's ``plugins_toml``), so its controller
could not pick static 8's width, the best there at acceptance 0.9; 16 from 32 requests on would hold 3.7 GB of
graph logits (float32, 128256 tokens a row) and never won a cell there."""
WIDE_WORKSPACE = {"SGLANG_FLASHINFER_WORKSPACE_SIZE": str(1 << 30)}
"""128 requests x 16 tokens overflow flashinfer's default 384 MB workspace while SGLang captures the
TARGET_VERIFY graph (seen on the H200, 0.5.16: batch_prefill_tmp_s; the start-up check predicts it); SGLang
reads the size from this variable. Every engine that captures width 16 at 128 requests gets 1 GiB."""

ENGINES: Dict[str, Dict[str, Any]] = {
    "plain": {"kind": "plain"},
    "static4_ndt8": {"kind": "static", "ndt": 8, "width": 4},
    "controller_ndt8": {"kind": "controller", "ndt": 8},
    "by_batch_ndt8": {"kind": "by_batch", "ndt": 8},
    "static2_ndt8": {"kind": "static", "ndt": 8, "width": 2},
    "static8_ndt8": {"kind": "static", "ndt": 8, "width": 8},
    "ngram_ndt8": {"kind": "ngram", "ndt": 8},
    "static16_ndt16": {"kind": "static", "ndt": 16, "width": 16, "env": WIDE_WORKSPACE},
    "controller_ndt16": {"kind": "controller", "ndt": 16},
    "by_batch_ndt16": {"kind": "by_batch", "ndt": 16},
    # killed on 2026-12-02 (rc -9, 58 s: SGLang stops every process when a scheduler fails) without the variable
    "ngram_ndt16": {"kind": "ngram", "ndt": 16, "env": WIDE_WORKSPACE},
    "plain_sync": {"kind": "plain", "sync": True},
}
"""In the order they run: plain first (it records the continuations every other engine drafts). A static
width below 16 runs once, at ndt 8: at ndt 16 the same width differs only in the KV it reserves ahead.
``plain_sync`` (plain decoding without the overlap scheduler, as every speculative engine here runs) last."""


def prompts(batch: int) -> List[List[int]]:
    rng = random.Random(f"e2e-{batch}")
    return [[LLAMA3_8B["bos_token_id"]] + [rng.randrange(1000, 100000) for _ in range(PROMPT_LEN - 1)] for _ in range(batch)]


def table_text(table: Dict[int, Any]) -> str:
    return "{" + ", ".join(f"{k} = {v}" for k, v in table.items()) + "}"


def plugins_toml(spec: Dict[str, Any], continuations: Path) -> str:
    """plugins.toml of a CONTROLLED_ACCEPTANCE engine."""
    lines = ['[plugins]', 'enable = ["controlled_acceptance"]', '[algorithms.CONTROLLED_ACCEPTANCE]',
             f'continuations = "{continuations}"', f"max_tokens_per_req = {spec['ndt']}"]
    if spec["kind"] == "static":
        lines.append(f"verify_width = {spec['width']}")
    elif spec["kind"] == "by_batch":
        lines.append(f"widths_by_batch_size = {table_text(BY_BATCH[spec['ndt']])}")
    else:
        lines += [f"widths_by_batch_size = {table_text(CANDIDATES[spec['ndt']])}", "widths_by_acceptance = {log_every = 8}"]
    return "\n".join(lines) + "\n"


def widths_table(spec: Dict[str, Any]):
    """The engine's widths by batch size (for the graphs' cost), None for one width."""
    from sglang_spec_plugins.widths_by_batch_size import WidthsByBatchSize

    table = {"by_batch": BY_BATCH, "controller": CANDIDATES}.get(spec["kind"])
    return None if table is None else WidthsByBatchSize.parse(table[spec["ndt"]])


def graphs_estimate(spec: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """check's estimate of the engine's decode graphs (widths_by_batch_size.graph_cost); None for one width."""
    from sglang_spec_plugins.widths_by_batch_size import graph_cost

    table = widths_table(spec)
    return None if table is None else graph_cost(table, BATCHES, VOCAB)


def write_model() -> None:
    if (MODEL / "config.json").exists():
        return
    from transformers import LlamaConfig

    LlamaConfig(**LLAMA3_8B, architectures=["LlamaForCausalLM"]).save_pretrained(MODEL)  # SGLang picks the model class by it


def engine_kwargs(spec: Dict[str, Any]) -> Dict[str, Any]:
    kwargs = dict(model_path=str(MODEL), load_format="dummy", skip_tokenizer_init=True, attention_backend="flashinfer",
                  mem_fraction_static=0.75, max_running_requests=max(BATCHES), disable_radix_cache=True,
                  cuda_graph_bs_decode=list(BATCHES), disable_prefill_cuda_graph=True, random_seed=0, log_level="info")
    if spec.get("sync"):
        kwargs["disable_overlap_schedule"] = True
    if spec["kind"] == "ngram":
        kwargs.update(speculative_algorithm="NGRAM", speculative_num_draft_tokens=spec["ndt"], speculative_eagle_topk=1,
                      speculative_num_steps=spec["ndt"] - 1, disable_overlap_schedule=True)
    elif spec["kind"] != "plain":
        kwargs.update(speculative_algorithm="CONTROLLED_ACCEPTANCE", speculative_num_draft_tokens=spec["ndt"],
                      disable_overlap_schedule=True)
    return kwargs


def generate(engine, batch: int, new_tokens: int, acceptance: Optional[float]):
    params = {"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}
    if acceptance is not None:
        params["custom_params"] = {"acceptance": acceptance}
    started = time.perf_counter()
    outputs = engine.generate(input_ids=prompts(batch), sampling_params=params)
    return outputs, time.perf_counter() - started


WARM_TOKENS = 16
"""Tokens of the untimed run before a cell of an engine without the controller (kernels warm at the shape)."""


def cell(engine, batch: int, acceptance: Optional[float], controller: bool) -> Dict[str, Any]:
    # untimed: kernels warm at this shape; the controller's also settles at this batch size and acceptance
    generate(engine, batch, NEW_TOKENS if controller else WARM_TOKENS, acceptance)
    outputs, seconds = generate(engine, batch, NEW_TOKENS, acceptance)
    tokens = sum(len(o["output_ids"]) for o in outputs)
    verify = sum(o.get("meta_info", {}).get("spec_verify_ct") or 0 for o in outputs)
    return {"batch": batch, "acceptance": acceptance, "tokens": tokens, "seconds": round(seconds, 4),
            "tokens_per_s": round(tokens / seconds, 1),
            # the first token of each request comes from the prefill
            "committed_per_verify": round((tokens - len(outputs)) / verify, 3) if verify else None}


def engine_main(label: str, out: Path) -> Dict[str, Any]:
    """One engine: start it, run every cell, shut it down; its result record."""
    spec = ENGINES[label]
    record: Dict[str, Any] = {"label": label, **spec, "ok": False}
    continuations = out / CONTINUATIONS
    if spec["kind"] in ("static", "by_batch", "controller"):
        config = out / "configs" / f"{label}.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(plugins_toml(spec, continuations))
        os.environ["SGLANG_SPEC_PLUGINS_CONFIG"] = str(config)
        record["plugins_toml"] = config.read_text()
        record["graphs_estimate"] = graphs_estimate(spec)
    os.environ.update(spec.get("env", {}))
    import sglang
    import torch

    record.update(sglang=sglang.__version__, torch=torch.__version__, device=torch.cuda.get_device_name(0))
    started = time.perf_counter()
    engine = sglang.Engine(**engine_kwargs(spec))
    record["engine_start_s"] = round(time.perf_counter() - started, 1)
    if label == "plain":  # the continuations every CONTROLLED_ACCEPTANCE engine drafts
        runs = []
        for batch in BATCHES:
            outputs, _ = generate(engine, batch, RECORDED, None)
            runs += [(p, o["output_ids"]) for p, o in zip(prompts(batch), outputs)]
        from controlled_acceptance_drafter.record import record as make_record

        continuations.write_text(json.dumps(make_record(runs)))
    plugin = spec["kind"] in ("static", "by_batch", "controller")
    record["cells"] = [cell(engine, batch, acceptance, spec["kind"] == "controller") for acceptance in (ACCEPTANCES if plugin else (None,))
                       for batch in BATCHES]
    engine.shutdown()
    record["ok"] = True
    return record


_CAPTURE = re.compile(r"Capture ([\w ]+?) (?:cuda|CUDA) graph end\. elapsed=([\d.]+) s, mem usage=([\d.]+) GB")
"""SGLang's line at the end of a graph capture (0.5.16: "Capture target verify CUDA graph end. elapsed=6.13 s,
mem usage=1.98 GB, ..."; "target decode" for plain decoding's graphs)."""
_SWITCHES = re.compile(r"widths by acceptance after (\d+) switches")


def read_log(log: Path) -> Dict[str, Any]:
    """What SGLang's and the loader's log lines say: graph capture time and memory, controller switches."""
    text = log.read_text(errors="replace") if log.exists() else ""
    found: Dict[str, Any] = {}
    for name, seconds, gb in _CAPTURE.findall(text):
        name = name.lower().replace(" ", "_")
        found[f"{name}_graph_capture_s"], found[f"{name}_graph_mem_gb"] = float(seconds), float(gb)
    switches = [int(n) for n in _SWITCHES.findall(text)]
    if switches:
        found["controller_switches_logged"] = max(switches)
    return found


def done_labels(results: Path) -> set:
    if not results.exists():
        return set()
    return {json.loads(line)["label"] for line in results.read_text().splitlines()
            if line.strip() and json.loads(line).get("ok")}


def run_engine(label: str, out: Path, log: Path, timeout: float) -> Any:
    """The engine in its own process group (SGLang's scheduler processes with it), killed at ``timeout``."""
    with open(log, "w") as sink:
        proc = subprocess.Popen([sys.executable, __file__, "engine", label, "--out", str(out)], stdout=sink,
                                stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            return "killed at the deadline"


def run_main(args) -> int:
    began = time.time()
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    if args.state:
        for name in (RESULTS, CONTINUATIONS):
            if (Path(args.state) / name).exists() and not (out / name).exists():
                shutil.copy(Path(args.state) / name, out / name)
    write_model()
    wanted = args.only.split(",") if args.only else [label for label in ENGINES if label != "plain_sync"]
    for label in wanted:
        if label in done_labels(out / RESULTS):
            continue
        if ENGINES[label]["kind"] not in ("plain", "ngram") and not (out / CONTINUATIONS).exists():
            print(f"SKIP {label}: no recorded continuations (run plain first)", flush=True)
            continue
        left = args.deadline - (time.time() - began)
        if left < args.engine_seconds:
            print(f"STOP before {label}: {left:.0f} s left, an engine takes up to {args.engine_seconds} s", flush=True)
            break
        log = out / "logs" / f"{label}.log"
        started = time.time()
        rc = run_engine(label, out, log, timeout=left)
        line = next((ln for ln in reversed(log.read_text(errors="replace").splitlines()) if ln.startswith("RESULT ")), None)
        record = json.loads(line[len("RESULT "):]) if line else {"label": label, "ok": False, "rc": rc}
        record.update(read_log(log), process_s=round(time.time() - started, 1),
                      date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                      command=" ".join(sys.argv))
        with open(out / RESULTS, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{label}: ok={record['ok']} {record['process_s']} s", flush=True)
    missing = [label for label in wanted if label not in done_labels(out / RESULTS)]
    print(f"done: {len(wanted) - len(missing)} of {len(wanted)}; missing: {', '.join(missing) or 'none'}", flush=True)
    return 0


# -- the tables -------------------------------------------------------------------

BAR = {"vs_best_static": 0.97, "vs_ndt_where_not_best": 1.15, "vs_plain": 0.98}
"""Issue 23's bar: the controller within 3% of the best static width, at least 1.15x static ndt where ndt is
not the best width, and never below 0.98x plain decoding."""


def cells(results: List[Dict[str, Any]], key: str = "tokens_per_s") -> Dict[str, Dict[tuple, float]]:
    """``{label: {(batch, acceptance): cell[key]}}`` of the engines that finished; plain and NGRAM cells
    (acceptance None) stand for every acceptance."""
    out: Dict[str, Dict[tuple, float]] = {}
    for r in results:
        if not r.get("ok"):
            continue
        for c in r["cells"]:
            for a in (ACCEPTANCES if c["acceptance"] is None else (c["acceptance"],)):
                out.setdefault(r["label"], {})[(c["batch"], a)] = c[key]
    return out


def static_label(width: int) -> str:
    return f"static{width}_ndt{8 if width < 16 else 16}"


def tables(results: List[Dict[str, Any]]) -> str:
    """Per ndt, one markdown table of tokens/s and the bar's ratios per (batch, acceptance), and the engines'
    graph capture time and memory."""
    r, committed = cells(results), cells(results, "committed_per_verify")
    parts = []
    for ndt in NDTS:
        statics = [w for w in (2, 4, 8, 16) if w <= ndt]
        cols = ["plain"] + [static_label(w) for w in statics] + [f"by_batch_ndt{ndt}", f"controller_ndt{ndt}", f"ngram_ndt{ndt}"]
        head = ["batch", "acceptance", "plain"] + [f"static {w}" for w in statics] + ["by batch", "controller", "NGRAM",
                                                                                         "ctl ÷ best static", f"ctl ÷ static {ndt}",
                                                                                         "ctl ÷ plain", "bar",
                                                                                         "committed/verify: static 4, ctl"]
        rows = [f"**ndt {ndt}**, tokens/s (CUDA graphs, flashinfer)", "", "| " + " | ".join(head) + " |",
                "|" + "---|" * len(head)]
        for a in ACCEPTANCES:
            for b in BATCHES:
                values = [r.get(c, {}).get((b, a)) for c in cols]
                ctl, plain = values[-2], values[0]
                static = {w: r.get(static_label(w), {}).get((b, a)) for w in statics}
                best = max((v for v in static.values() if v is not None), default=None)
                ratios, verdict = ["-"] * 3, "-"
                if None not in (ctl, plain, best, static[ndt]):
                    vs_best, vs_ndt, vs_plain = ctl / best, ctl / static[ndt], ctl / plain
                    ndt_is_best = static[ndt] >= best
                    ok = vs_best >= BAR["vs_best_static"] and vs_plain >= BAR["vs_plain"] and \
                        (ndt_is_best or vs_ndt >= BAR["vs_ndt_where_not_best"])
                    ratios = [f"{vs_best:.2f}", f"{vs_ndt:.2f}" + ("" if not ndt_is_best else " (best)"), f"{vs_plain:.2f}"]
                    verdict = "met" if ok else "missed"
                per_verify = [committed.get(static_label(4), {}).get((b, a)), committed.get(f"controller_ndt{ndt}", {}).get((b, a))]
                rows.append("| " + " | ".join([str(b), f"{a}"] + ["-" if v is None else f"{v:.0f}" for v in values]
                                                + ratios + [verdict, ", ".join("-" if v is None else f"{v:.2f}" for v in per_verify)])
                            + " |")
        parts.append("\n".join(rows))
    head = ["engine", "start s", "decode graphs: capture s", "memory GB (SGLang's log)", "estimate: graphs, logit GB",
            "switches logged"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rec in results:
        if not rec.get("ok"):
            continue
        est, kind = rec.get("graphs_estimate"), _graph_kind(rec)
        rows.append("| " + " | ".join([rec["label"], str(rec.get("engine_start_s", "-")),
                                       str(rec.get(f"{kind}_graph_capture_s", "-")), str(rec.get(f"{kind}_graph_mem_gb", "-")),
                                       f"{est['graphs']}, {est['logit_bytes'] / 1e9:.2f}" if est else f"{len(BATCHES)}, -",
                                       str(rec.get("controller_switches_logged", "-"))]) + " |")
    parts.append("\n".join(rows))
    return "\n\n".join(parts)


def _graph_kind(record: Dict[str, Any]) -> str:
    """The graphs an engine's decode steps replay: a speculative engine's TARGET_VERIFY graphs, else decode's."""
    return "target_verify" if "target_verify_graph_capture_s" in record else "target_decode"


def relog(results: Path, log_dirs: List[Path]) -> List[Dict[str, Any]]:
    """The results with each finished engine's log fields (``read_log``) read again from ``<dir>/<label>.log``,
    the last of ``log_dirs`` holding one winning (the calls' ``logs.tar.xz``, oldest first)."""
    records = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    for record in records:
        logs = [d / f"{record['label']}.log" for d in log_dirs if (d / f"{record['label']}.log").exists()]
        if record.get("ok") and logs:
            record.update(read_log(logs[-1]))
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run the engines not yet in the results (on the H200)")
    p_run.add_argument("--out", required=True)
    p_run.add_argument("--state", help="a directory holding earlier calls' results and continuations")
    p_run.add_argument("--deadline", type=float, default=480, help="start no engine after this many seconds")
    p_run.add_argument("--engine-seconds", type=float, default=150, help="the most one engine is expected to take")
    p_run.add_argument("--only", help="comma-separated labels (default: every engine but plain_sync, in order)")
    p_engine = sub.add_parser("engine", help="one engine (run starts it in its own process)")
    p_engine.add_argument("label", choices=ENGINES)
    p_engine.add_argument("--out", required=True)
    p_tables = sub.add_parser("tables", help="print the README tables of a results file")
    p_tables.add_argument("results", type=Path)
    p_relog = sub.add_parser("relog", help="read the engines' log fields again (print the results file)")
    p_relog.add_argument("results", type=Path)
    p_relog.add_argument("logs", type=Path, nargs="+", help="directories of <label>.log, oldest first")
    args = parser.parse_args(argv)
    if args.command == "relog":
        print("\n".join(json.dumps(r) for r in relog(args.results, args.logs)))
        return 0
    if args.command == "run":
        return run_main(args)
    if args.command == "tables":
        print(tables([json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]))
        return 0
    record = {"label": args.label, "ok": False}
    try:
        record = engine_main(args.label, Path(args.out))
    except BaseException as exc:  # noqa: BLE001 - the record says what stopped the engine
        import traceback

        traceback.print_exc()
        record["error"] = f"{type(exc).__name__}: {str(exc)[:2000]}"
    finally:
        print("RESULT " + json.dumps(record), flush=True)
        sys.stdout.flush()
        os._exit(0 if record.get("ok") else 1)


if __name__ == "__main__":
    sys.exit(main())
