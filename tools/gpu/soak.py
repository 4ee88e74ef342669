"""Soak: thousands of mixed requests through a real ``sglang.Engine`` and through SGLang's HTTP server
serving a plugin drafter, on one GPU, against the plain engine's outputs request by request.

usage (on the GPU, under run.sh's environment; ``tools/gpu/engine/run.sh setup soak``):
    python3 soak.py coordinate --out DIR [--requests 2000] [--http-requests 2000] [--seed 0] [--budget 430]
                               [--max-total-tokens 8192] [--concurrency 128] [--cuda-graph] [--sync]
                               [--mix sampled=0.3,logprob=0.1,json=0.1,abort=0.05] [--mem-fraction 0.2]
                               [--algorithm PROMPT_LOOKUP | FAULTY_LOOKUP | DFLASH_BLOCK --draft DRAFT_DIR]
    python3 soak.py summarize --out DIR [the coordinate flags]     (re-read a finished soak; logs: $SOAK_LOGS)

The target is ``$ENGINE_MODEL`` (run.sh: ``$SOAK_MODEL``, default the tiny Llama). ``--algorithm``: the
drafter (``DRAFTERS``): PROMPT_LOOKUP (model-free), FAULTY_LOOKUP (PROMPT_LOOKUP faulting in ~1% of its decode
steps, ``tools/gpu/faulty_drafter``) or DFLASH_BLOCK (the example drafter with its own DFlash-layout draft
model from ``--draft``, with weights, verifying the full block).

The request set is ``sglang_spec_plugins.testing.soak.mixed_requests`` (prompts of our own: 8 to 1,024
tokens, 1 to 256 new tokens, EOS ignored; ``--mix``: the share of sampled, logprob, JSON-schema and
client-aborted requests, default ``testing.soak.DEFAULT_MIX``; JSON ones need a tokenizer, so the coordinator
writes a byte-level one into the target's folder where it has none). The coordinator starts three processes at
once (flashinfer's JIT builds under a file lock, so they share one compilation), each with SGLang's overlap
scheduler unless ``--sync``:

* ``engine plain``: ``sglang.Engine`` without speculative decoding; serves the greedy, logprob and JSON
  requests (``testing.soak.DETERMINISTIC``); then, once the other two have written their outcomes, asks itself
  for the two most likely tokens at every point where a speculative run's output left its own
  (``margins.margin``: a near-tie or not);
* ``engine spec``: ``sglang.Engine`` with ``--speculative-algorithm ALGORITHM
  --speculative-num-draft-tokens 4`` and the drafter's plugins.toml; every request, through
  ``async_generate``, at most ``--concurrency`` in flight; aborts through the tokenizer manager's
  ``abort_request``;
* ``http``: ``python3 -m sglang.launch_server`` with the same flags and a client of threads here (stdlib
  ``http.client``): ``POST /generate``, aborts by closing the connection mid-stream (a client that goes
  away).

Every engine: flashinfer attention, CUDA graphs off (``--cuda-graph`` turns them on), radix cache off (so
a free KV pool is exactly zero tokens in use), a KV pool of ``--max-total-tokens`` (small: SGLang retracts
requests), SGLang's own pool checks strict (``testing.soak.STRICT_POOL_CHECKS``: an accounting error stops the
scheduler). After its last request each process waits until the scheduler is
idle and records SGLang's own load snapshot (``tokenizer_manager.get_loads`` / ``GET /v1/loads``: requests
running and waiting, KV tokens in use), ``flush_cache`` (which succeeds only with no request left) and one
more request (the scheduler is alive: a leak found at idle would have stopped it).

Results in DIR: ``requests.json`` (the set's parameters), ``<phase>.jsonl`` (one outcome per request),
``<phase>.json`` (wall time, tokens, end state), ``margins.json``, ``summary.json`` (per phase:
``testing.soak.verdict`` against the plain outputs, retractions, aborts, refusals, tokens/s, the end
state, the loader's lines per process: its INFO lines, the faulted steps by hook, switch-offs, and SGLang's
"Scheduler hit an exception" lines, each a problem) and the coordinator prints it. Exit 0 when no phase has a
problem. Each process stops sending new requests at ``--budget`` minus 35 s (the summary says how many
were sent: fewer than planned is a problem) and is killed at ``--budget`` plus 5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sglang_spec_plugins.testing.soak import DETERMINISTIC, JSON


HERE = Path(__file__).resolve().parent
ENGINE_DIR = HERE / "engine"
DRAFTERS = {"PROMPT_LOOKUP": ENGINE_DIR / "plugins_widths.toml", "DFLASH_BLOCK": ENGINE_DIR / "plugins_draft.toml",
            "FAULTY_LOOKUP": ENGINE_DIR / "plugins_faulty.toml"}
"""The drafters a soak serves (``--algorithm``) and the plugins.toml each runs with: PROMPT_LOOKUP with
widths by batch size, DFLASH_BLOCK (a draft model, ``--draft``) at the full block, FAULTY_LOOKUP
(``tools/gpu/faulty_drafter``: PROMPT_LOOKUP whose hooks fault in about 1% of its decode steps)."""
NDT = 4
PHASES = ("plain", "spec", "http")
MAX_MARGINS = 60
"""Divergences measured per phase (the first ones, by request order)."""
NO_PLUGIN = "none-selected"


def engine_kwargs(args, spec: bool) -> dict:
    """The server arguments of a phase, those the installed release has (``disable_prefill_cuda_graph``
    came with prefill graphs, 0.5.14)."""
    import inspect

    from sglang.srt.server_args import ServerArgs

    kwargs = dict(model_path=model_path(), skip_tokenizer_init=JSON not in args.mix,
                  attention_backend="flashinfer", mem_fraction_static=args.mem_fraction, max_total_tokens=args.max_total_tokens,
                  max_running_requests=args.concurrency, chunked_prefill_size=2048, disable_radix_cache=True,
                  random_seed=0, log_level="info", disable_overlap_schedule=args.sync, disable_prefill_cuda_graph=True)
    if not args.cuda_graph:
        kwargs["disable_cuda_graph"] = True
    if spec:
        kwargs.update(speculative_algorithm=args.algorithm, speculative_num_draft_tokens=NDT)
        if args.draft:
            kwargs["speculative_draft_model_path"] = args.draft
    known = set(inspect.signature(ServerArgs).parameters)
    return {name: value for name, value in kwargs.items() if name in known}


def server_flags(kwargs: dict) -> list:
    """``launch_server`` flags for ``engine_kwargs``."""
    flags = []
    for name, value in kwargs.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is not False and value is not None:
            flags += [flag, str(value)]
    return flags


def model_path() -> str:
    return os.environ.get("ENGINE_MODEL", "/tmp/tiny-llama")


def requests_of(args):
    from sglang_spec_plugins.testing.soak import mixed_requests

    return mixed_requests(args.requests, args.seed, mix=args.mix)


def write_tokenizer(folder: Path) -> None:
    """A byte-level tokenizer of the target's vocabulary (``testing.scheduler_start.write_byte_tokenizer``):
    SGLang compiles a JSON schema against the tokenizer's vocabulary."""
    from sglang_spec_plugins.testing.scheduler_start import write_byte_tokenizer

    write_byte_tokenizer(folder, json.loads((folder / "config.json").read_text()))


def parse_mix(text: str) -> dict:
    """``--mix sampled=0.3,logprob=0.1,json=0.1,abort=0.05``: each kind's share (``testing.soak``)."""
    mix = {}
    for item in filter(None, text.split(",")):
        kind, _, share = item.partition("=")
        mix[kind.strip()] = float(share)
    return mix


def outcome_of(out: dict, **extra) -> dict:
    meta = out.get("meta_info", {})
    return {"output_ids": list(out.get("output_ids") or []), "text": out.get("text"), "finish": meta.get("finish_reason"),
            "retractions": meta.get("num_retractions", 0), "verify_steps": meta.get("spec_verify_ct", 0), **extra}


# ---------------------------------------------------------------- sglang.Engine

async def serve_engine(engine, batch, args, stop_at: float) -> dict:
    """Every request of ``batch`` through ``engine.async_generate``; outcomes by rid."""
    gate = asyncio.Semaphore(args.concurrency)
    outcomes, manager = {}, engine.tokenizer_manager

    async def one(r):
        async with gate:
            if time.time() > stop_at:
                return
            common = dict(input_ids=list(r.input_ids), sampling_params=r.sampling_params(),
                          return_logprob=r.return_logprob, rid=r.rid)
            try:
                if not r.stream:
                    outcomes[r.rid] = outcome_of(await engine.async_generate(**common))
                    return
                entry = {"output_ids": [], "finish": None, "chunks": 0, "abort_sent": False}
                outcomes[r.rid] = entry
                async for chunk in await engine.async_generate(**common, stream=True):
                    entry.update({**outcome_of(chunk), "chunks": entry["chunks"] + 1, "abort_sent": entry["abort_sent"]})
                    if entry["chunks"] >= r.abort_after and not entry["abort_sent"]:
                        manager.abort_request(r.rid)
                        entry["abort_sent"] = True
            except Exception as exc:  # a refusal of a non-streamed request arrives as a ValueError with its message
                outcomes.setdefault(r.rid, {"output_ids": [], "finish": None})["error"] = f"{type(exc).__name__}: {exc}"

    await asyncio.gather(*(one(r) for r in batch))
    return outcomes


async def end_state_engine(engine) -> dict:
    """SGLang's own view once idle: load snapshot, flush_cache, one more request."""
    await asyncio.sleep(3)
    loads = [load.to_dict(None) for load in await engine.tokenizer_manager.get_loads(include=["all"])]
    flushed = await engine.tokenizer_manager.flush_cache()
    probe = await asyncio.wait_for(engine.async_generate(input_ids=[1, 5, 6, 7],
                                                         sampling_params={"temperature": 0, "max_new_tokens": 4}), 120)
    return {"loads": loads, "flush_cache": bool(getattr(flushed, "success", False)),
            "alive": len(probe.get("output_ids") or []) == 4}


def run_engine(args, phase: str) -> None:
    import sglang

    batch = [r for r in requests_of(args) if phase == "spec" or r.kind in DETERMINISTIC]
    record = {"phase": phase, "sglang": sglang.__version__, "ok": False}
    started = time.time()
    engine = sglang.Engine(**engine_kwargs(args, spec=phase == "spec"))
    record["engine_start_s"] = round(time.time() - started, 1)
    began = time.time()
    outcomes = engine.loop.run_until_complete(serve_engine(engine, batch, args, args.stop_at))
    record.update(wall_s=round(time.time() - began, 1), sent=len(outcomes), planned=len(batch))
    write_outcomes(args.out / f"{phase}.jsonl", outcomes)
    record["end_state"] = engine.loop.run_until_complete(end_state_engine(engine))
    if phase == "plain":
        record["margins"] = engine.loop.run_until_complete(measure_margins(engine, args, outcomes))
    record["ok"] = True
    (args.out / f"{phase}.json").write_text(json.dumps(record, indent=1))
    engine.shutdown()


async def measure_margins(engine, args, plain: dict) -> dict:
    """For each speculative phase, once its outcomes are written: the plain engine's top two tokens where
    its greedy output and the phase's first differ (the first :data:`MAX_MARGINS`)."""
    sys.path.insert(0, str(ENGINE_DIR))
    from margins import MARGIN_REQUEST, margin

    from sglang_spec_plugins.testing.soak import verdict

    batch = requests_of(args)
    by_rid = {r.rid: r for r in batch}
    found = {}
    for phase in ("spec", "http"):
        path = args.out / f"{phase}.jsonl"
        while not path.exists() and time.time() < args.stop_at + 30:
            await asyncio.sleep(2)
        if not path.exists():
            found[phase] = {"skipped": "no outcomes before the budget ran out"}
            continue
        await asyncio.sleep(1)  # written whole: the writer renames a complete file into place
        divergent = verdict(batch, read_outcomes(path), {rid: o["output_ids"] for rid, o in plain.items()})["divergent"]
        rows = []
        for d in divergent[:MAX_MARGINS]:
            prompt = list(by_rid[d["rid"]].input_ids) + plain[d["rid"]]["output_ids"][:d["at"]]
            out = await engine.async_generate(input_ids=prompt, **MARGIN_REQUEST)
            rows.append({**d, **margin(out, d["token"], d["plain_token"])})
        found[phase] = {"divergent": len(divergent), "measured": rows}
    return found


# ---------------------------------------------------------------- SGLang's HTTP server

def http_call(port: int, path: str, body=None, timeout: float = 600):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST" if body is not None else "GET", path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def http_one(port: int, r) -> dict:
    body = {"input_ids": list(r.input_ids), "sampling_params": r.sampling_params(), "return_logprob": r.return_logprob,
            "rid": r.rid}
    if not r.stream:
        status, text = http_call(port, "/generate", body)
        if status == 200:
            return outcome_of(json.loads(text))
        try:
            message = json.loads(text)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = text
        return {"output_ids": [], "finish": None, "error": f"HTTP {status}: {message}"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    entry = {"output_ids": [], "finish": None, "chunks": 0}
    try:
        conn.request("POST", "/generate", body=json.dumps({**body, "stream": True}),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        while True:
            line = response.readline()
            if not line:
                break
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            entry.update({**outcome_of(chunk), "chunks": entry["chunks"] + 1})
            if "error" in chunk:
                entry["error"] = chunk["error"].get("message")
            if entry["chunks"] >= r.abort_after and entry["finish"] is None:
                entry["disconnected"] = True  # the client goes away mid-stream
                break
    finally:
        conn.close()
    return entry


def run_http(args) -> None:
    batch = requests_of(args)[:args.http_requests]
    port = 31000 + os.getpid() % 1000
    record = {"phase": "http", "ok": False, "port": port}
    log = open(Path(os.environ.get("SOAK_LOGS", "/tmp/engine-logs")) / "soak_http_server.log", "w")
    env = dict(os.environ, SGLANG_SPEC_PLUGINS_CONFIG=str(DRAFTERS[args.algorithm]))
    server = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", *server_flags(engine_kwargs(args, spec=True)),
                               "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                              env=env, start_new_session=True)
    started = time.time()
    try:
        while time.time() < args.stop_at:
            if server.poll() is not None:
                raise RuntimeError(f"the server exited with {server.returncode} before it was ready")
            try:
                if http_call(port, "/health_generate", timeout=30)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(2)
        record["engine_start_s"] = round(time.time() - started, 1)
        began = time.time()
        outcomes = {}
        with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
            futures = {}
            for r in batch:
                if time.time() > args.stop_at:
                    break
                futures[r.rid] = pool.submit(http_one, port, r)
            for rid, future in futures.items():
                try:
                    outcomes[rid] = future.result()
                except Exception as exc:
                    outcomes[rid] = {"output_ids": [], "finish": None, "error": f"{type(exc).__name__}: {exc}"}
        record.update(wall_s=round(time.time() - began, 1), sent=len(outcomes), planned=len(batch))
        write_outcomes(args.out / "http.jsonl", outcomes)
        time.sleep(5)  # the server aborts a disconnected stream 2 s after it ends, then the scheduler idles
        status, loads = http_call(port, "/v1/loads?include=all")
        flushed = http_call(port, "/flush_cache")[0] == 200
        probe = http_call(port, "/generate", {"input_ids": [1, 5, 6, 7], "sampling_params": {"temperature": 0, "max_new_tokens": 4}})
        record["end_state"] = {"loads": json.loads(loads)["loads"] if status == 200 else loads, "flush_cache": flushed,
                               "alive": probe[0] == 200 and len(json.loads(probe[1]).get("output_ids") or []) == 4,
                               "server_running": server.poll() is None}
        record["ok"] = True
    finally:
        (args.out / "http.json").write_text(json.dumps(record, indent=1))
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


# ---------------------------------------------------------------- outcomes on disk, the coordinator

def write_outcomes(path: Path, outcomes: dict) -> None:
    scratch = path.with_suffix(".tmp")
    scratch.write_text("".join(json.dumps({"rid": rid, **o}) + "\n" for rid, o in outcomes.items()))
    scratch.rename(path)


def read_outcomes(path: Path) -> dict:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {row.pop("rid"): row for row in rows}


def loader_lines(log: Path) -> dict:
    """The loader's lines in a phase's log: its INFO line per process, the start-up check's, the faulted
    steps the worker base logged (by hook) and whether it switched the drafter off."""
    text = log.read_text(errors="replace") if log.exists() else ""
    faulted = re.findall(r"algorithm \w+: (\w+)\(.*; the step went on without it, every request exact", text)
    return {"loader": len(re.findall(r"sglang-spec-plugins \S+: plugins ", text)),
            "start_up_check": len(re.findall(r"sglang-spec-plugins: start-up check passed", text)),
            "errors": re.findall(r"sglang_spec_plugins\.errors\.\w+: (.*)", text)[:5],
            "faulted_steps": dict(sorted(Counter(faulted).items())),
            "switched_off": len(re.findall(r"switched off for this process after", text)),
            "scheduler_exceptions": len(re.findall(r"Scheduler hit an exception", text))}


def coordinate(args) -> int:
    from sglang_spec_plugins.testing.soak import STRICT_POOL_CHECKS

    args.out.mkdir(parents=True, exist_ok=True)
    if JSON in args.mix and not (Path(model_path()) / "tokenizer.json").exists():
        write_tokenizer(Path(model_path()))
    logs = Path(os.environ.get("SOAK_LOGS", "/tmp/engine-logs"))
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    stop_at = t0 + args.budget - 35
    (args.out / "requests.json").write_text(json.dumps({**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                                                        "started": t0}, indent=1))
    common = ["--out", str(args.out), "--requests", str(args.requests), "--http-requests", str(args.http_requests),
              "--seed", str(args.seed), "--max-total-tokens", str(args.max_total_tokens), "--concurrency",
              str(args.concurrency), "--stop-at", str(stop_at), *(["--cuda-graph"] if args.cuda_graph else []),
              "--algorithm", args.algorithm, *(["--draft", args.draft] if args.draft else []),
              "--mem-fraction", str(args.mem_fraction), "--mix", ",".join(f"{kind}={share}" for kind, share in args.mix.items()), *(["--sync"] if args.sync else [])]
    env = dict(os.environ, SOAK_LOGS=str(logs), **STRICT_POOL_CHECKS)
    env.pop("SGLANG_SPEC_PLUGINS_CONFIG", None)
    children = {}
    for phase, command in (("plain", ["engine", "plain"]), ("spec", ["engine", "spec"]), ("http", ["http"])):
        # the plain engine is SGLang alone: SGLANG_PLUGINS names no installed plugin, so the loader never runs
        child_env = dict(env, SGLANG_SPEC_PLUGINS_CONFIG=str(DRAFTERS[args.algorithm])) if phase != "plain" else dict(env, SGLANG_PLUGINS=NO_PLUGIN)
        children[phase] = subprocess.Popen([sys.executable, __file__, *command, *common], env=child_env, cwd="/tmp",
                                           stdout=open(logs / f"soak_{phase}.log", "w"), stderr=subprocess.STDOUT,
                                           start_new_session=True)
    for phase, child in children.items():
        try:
            child.wait(max(1.0, t0 + args.budget + 5 - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return summarize(args, {phase: child.returncode for phase, child in children.items()}, logs, time.time() - t0)


def summarize(args, rcs: dict, logs: Path, seconds: float) -> int:
    """Write ``summary.json`` from the phases' outcomes in ``args.out``, their exit codes ``rcs`` and their logs,
    and print it; 1 where a phase has a problem. The role ``summarize`` runs it again on a finished soak (the
    exit codes and the time from its ``summary.json``), after a change to ``testing.soak.verdict``."""
    from sglang_spec_plugins.testing.soak import verdict

    batch = requests_of(args)
    plain_path = args.out / "plain.jsonl"
    plain = {rid: o["output_ids"] for rid, o in read_outcomes(plain_path).items()} if plain_path.exists() else None
    plain_record = json.loads((args.out / "plain.json").read_text()) if (args.out / "plain.json").exists() else {}
    summary = {"sglang": plain_record.get("sglang"), "seconds": round(seconds, 1), "phases": {}}
    failed = False
    for phase, rc in rcs.items():
        path, record_path = args.out / f"{phase}.jsonl", args.out / f"{phase}.json"
        record = json.loads(record_path.read_text()) if record_path.exists() else {}
        entry = {"rc": rc, **{k: v for k, v in record.items() if k not in ("margins",)},
                 "log": loader_lines(logs / f"soak_{phase}.log")}
        if phase == "http":
            entry["log"] = loader_lines(logs / "soak_http_server.log")
        if path.exists():
            sent = read_outcomes(path)
            planned = [r for r in (batch[:args.http_requests] if phase == "http" else batch)
                       if phase != "plain" or r.kind in DETERMINISTIC]
            served = [r for r in planned if r.rid in sent]
            found = verdict(served, sent, plain if phase != "plain" else None)
            entry["verdict"] = found
            entry["tokens_per_s"] = round(found["tokens"] / record["wall_s"], 1) if record.get("wall_s") else None
        problems = list(entry.get("verdict", {}).get("problems", ["no outcomes"]))
        if record.get("sent") != record.get("planned"):
            problems.append(f"sent {record.get('sent')} of {record.get('planned')} requests before the budget ran out")
        state = record.get("end_state") or {}
        for load in state.get("loads") or []:
            if not isinstance(load, dict) or load.get("num_running_reqs") or load.get("num_waiting_reqs") or load.get("num_used_tokens"):
                problems.append(f"not idle at the end: {load}")
        if not state or not state.get("flush_cache") or not state.get("alive") or rc:
            problems.append(f"end state {state or 'missing'}, rc {rc}")
        if entry["log"]["scheduler_exceptions"]:
            problems.append(f"SGLang's scheduler hit an exception {entry['log']['scheduler_exceptions']} times")
        if entry["log"]["errors"]:
            problems.append(f"the loader refused: {entry['log']['errors']}")
        entry["problems"] = problems
        failed |= bool(problems)
        summary["phases"][phase] = entry
    summary["margins"] = plain_record.get("margins")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print_summary(summary)
    return 1 if failed else 0


def print_summary(summary: dict) -> None:
    print(f"soak on SGLang {summary['sglang']}, {summary['seconds']} s in all")
    for phase, e in summary["phases"].items():
        v = e.get("verdict", {})
        print(f"{phase:>5}: rc {e['rc']}, sent {e.get('sent')} of {e.get('planned')}, {v.get('finished')} of {v.get('greedy')} "
              f"greedy finished, {v.get('tokens')} tokens in {e.get('wall_s')} s ({e.get('tokens_per_s')} tokens/s), "
              f"retractions {v.get('retractions')} ({v.get('retracted_requests')} requests), aborted {v.get('aborted')} "
              f"(+{v.get('finished_before_abort')} finished first), sampled or logprob served "
              f"{v.get('served_beyond_greedy')}, refused {v.get('refused')} "
              f"({v.get('refused_with_message')} with the plugin's message), identical to plain {v.get('identical')} "
              f"of {v.get('compared')}; loader INFO lines {e['log']}; end {e.get('end_state')}")
        for problem in e["problems"][:20]:
            print(f"       problem: {problem}")
    for phase, m in (summary.get("margins") or {}).items():
        rows = m.get("measured", [])
        print(f"margins {phase}: {m.get('divergent')} divergent, {len(rows)} measured, largest margin "
              f"{max((r['margin'] for r in rows), default=None)}, chosen tokens the plain top two in "
              f"{sum(r['chosen_are_top2'] for r in rows)} of {len(rows)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("coordinate", "engine", "http", "summarize"))
    parser.add_argument("phase", nargs="?", choices=("plain", "spec"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--http-requests", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=430, help="seconds for everything, from the coordinator's start")
    parser.add_argument("--stop-at", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--max-total-tokens", type=int, default=8192)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--cuda-graph", action="store_true")
    parser.add_argument("--algorithm", choices=DRAFTERS, default="PROMPT_LOOKUP")
    parser.add_argument("--draft", help="the draft model's folder (DFLASH_BLOCK: a DFlash-layout draft with weights)")
    parser.add_argument("--mix", type=parse_mix, default=None,
                        help="each kind's share besides greedy, e.g. sampled=0.3,logprob=0.1,json=0.1,abort=0.05 "
                             "(default testing.soak.DEFAULT_MIX); json requests load a tokenizer (written into the "
                             "target's folder where it has none)")
    parser.add_argument("--mem-fraction", type=float, default=0.2,
                        help="each engine's --mem-fraction-static (three engines share the GPU; 0.12 for two soaks at once)")
    parser.add_argument("--sync", action="store_true", help="--disable-overlap-schedule (default: SGLang's overlap scheduler)")
    args = parser.parse_args()
    if args.mix is None:
        from sglang_spec_plugins.testing.soak import DEFAULT_MIX

        args.mix = dict(DEFAULT_MIX)
    if (args.algorithm == "DFLASH_BLOCK") != bool(args.draft):
        parser.error("--draft goes with --algorithm DFLASH_BLOCK, and only with it")
    if args.role == "coordinate":
        return coordinate(args)
    if args.role == "summarize":  # --out DIR and the soak's own flags (its requests.json says them)
        before = json.loads((args.out / "summary.json").read_text())
        return summarize(args, {phase: e["rc"] for phase, e in before["phases"].items()},
                         Path(os.environ.get("SOAK_LOGS", "/tmp/engine-logs")), before["seconds"])
    if args.role == "http":
        run_http(args)
    else:
        run_engine(args, args.phase)
    sys.stdout.flush()
    os._exit(0)  # SGLang's threads would keep the process alive


if __name__ == "__main__":
    sys.exit(main())
