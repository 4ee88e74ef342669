"""A small soak through SGLang's real ``Scheduler`` on a CPU (see :mod:`.soak`).

``python -m sglang_spec_plugins.testing.scheduler_soak [ALGORITHM] [--ndt N]
[--requests N] [--seed S] [--concurrency C] [--max-total-tokens T] [--only
RID,RID]`` (``--only``: serve only these requests of the set) makes the
installed release's real ``Scheduler`` as :mod:`.scheduler_serve` does (the
tiny random Llama, float32, triton attention interpreted, radix cache off, a
KV pool of ``T`` tokens: small, so that SGLang retracts requests), then
serves :func:`.soak.mixed_requests` through the ZMQ socket the tokenizer
manager binds, at most ``C`` in flight: greedy requests, sampled and
``return_logprob`` ones, and streamed requests the client aborts with
SGLang's own ``AbortReq`` after a few outputs. The release's own
``event_loop_normal`` runs in a thread, with its own idle-time pool checks.

After the last outcome and an idle second, it reads the scheduler's pools:
every KV slot free (``available_size() == max_total_num_tokens``), every
request slot free, no request waiting or running. It prints one JSON line:
per rid the :data:`.soak.Outcome`, the pools, the wall time, or the error.
One process per run (see :mod:`.scheduler_start`).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any, Dict, List, Optional, Sequence

from .scheduler_serve import _request, bind, run_event_loop
from .scheduler_start import make_scheduler
from .soak import ABORT, LOGPROB, SAMPLED, mixed_requests

TIMEOUT_S = 900
CPU_SET = dict(vocab=256, prompt_lengths=(4, 48), output_lengths=(8, 40),
               mix={SAMPLED: 0.075, LOGPROB: 0.075, ABORT: 0.15}, max_abort_after=3)
"""The request set the tiny Llama takes (vocabulary 256, 512 positions), short enough for a CPU, with more
sampled, logprob and aborted requests than the GPU soak's 5% each so that a few dozen requests hold several of each."""


def soak(algorithm: Optional[str], ndt: int = 4, requests: int = 32, seed: int = 0, concurrency: int = 8,
         max_total_tokens: int = 256, only: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Serve the set (or its requests named in ``only``) through the real
    scheduler; the result described in the module doc."""
    import zmq

    batch = [r for r in mixed_requests(requests, seed, **CPU_SET) if only is None or r.rid in only]
    sockets: Dict[str, Any] = {}
    began = time.monotonic()
    try:
        scheduler = make_scheduler(algorithm, ndt=ndt, before_init=lambda port_args: bind(port_args, sockets),
                                   attention_backend="triton", dtype="float32", disable_radix_cache=True,
                                   max_total_tokens=max_total_tokens, max_running_requests=concurrency)
    except Exception as exc:
        return {"served": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}
    from sglang.srt.managers.io_struct import AbortReq  # after make_scheduler's stand-ins

    failure = run_event_loop(scheduler)
    started = time.monotonic()
    pending = list(reversed(batch))
    by_rid = {r.rid: r for r in batch}
    outcomes: Dict[str, Dict[str, Any]] = {}
    in_flight: set = set()
    aborted: set = set()
    poller = zmq.Poller()
    poller.register(sockets["from_scheduler"], zmq.POLLIN)
    while (pending or in_flight) and not failure and time.monotonic() - started < TIMEOUT_S:
        while pending and len(in_flight) < concurrency:
            r = pending.pop()
            sockets["to_scheduler"].send_pyobj(_request(
                r.rid, list(r.input_ids), r.max_new_tokens, temperature=0.8 if r.kind == SAMPLED else 0.0,
                return_logprob=r.return_logprob, stream=r.stream))
            in_flight.add(r.rid)
            outcomes[r.rid] = {"output_ids": [], "finish": None, "chunks": 0, "retractions": 0, "verify_steps": 0}
        if not poller.poll(100):
            continue
        out = sockets["from_scheduler"].recv_pyobj()
        if type(out).__name__ != "BatchTokenIDOutput":
            continue
        retractions = getattr(out, "retraction_counts", None)
        verify = getattr(out, "spec_verify_ct", None)
        for i, rid in enumerate(out.rids):
            if rid not in outcomes:
                continue
            entry = outcomes[rid]
            entry["output_ids"].extend(int(t) for t in out.output_ids[i])
            entry["chunks"] += 1
            entry["retractions"] = int(retractions[i]) if retractions else 0
            entry["verify_steps"] = int(verify[i]) if verify else 0
            if out.finished_reasons[i] is not None:
                entry["finish"] = out.finished_reasons[i]
                in_flight.discard(rid)
            elif by_rid[rid].stream and entry["chunks"] >= by_rid[rid].abort_after and rid not in aborted:
                sockets["to_scheduler"].send_pyobj(AbortReq(rid=rid))  # what the tokenizer manager sends
                aborted.add(rid)
    serve_s = time.monotonic() - started
    time.sleep(1.0)  # let the loop go idle and run its own pool checks
    pools = _pools(scheduler)
    return {"served": not in_flight and not pending and not failure, "error": failure[0] if failure else None,
            "outcomes": outcomes, "pools": pools, "init_s": round(started - began, 1), "serve_s": round(serve_s, 1)}


def _pools(scheduler) -> Dict[str, Any]:
    """What the scheduler holds now: KV slots and request slots, free and in all; requests waiting and running."""
    kv = scheduler.token_to_kv_pool_allocator
    req = scheduler.req_to_token_pool
    return {"kv_free": int(kv.available_size()), "kv_total": int(scheduler.max_total_num_tokens),
            "req_slots_free": len(req.free_slots), "req_slots_total": int(req.size),
            "waiting": len(scheduler.waiting_queue), "running": len(scheduler.running_batch.reqs)}


def main(argv: List[str]) -> int:
    algorithm = argv[0] if argv and not argv[0].startswith("--") else None
    options = dict(zip(argv[1 if algorithm else 0::2], argv[2 if algorithm else 1::2]))
    result = soak(algorithm, ndt=int(options.get("--ndt", 4)), requests=int(options.get("--requests", 32)),
                  seed=int(options.get("--seed", 0)), concurrency=int(options.get("--concurrency", 8)),
                  max_total_tokens=int(options.get("--max-total-tokens", 256)),
                  only=options["--only"].split(",") if "--only" in options else None)
    print(json.dumps(result), flush=True)
    sys.stdout.flush()
    os._exit(0)  # the scheduler's loop thread and sockets would keep the process alive


if __name__ == "__main__":
    main(sys.argv[1:])
