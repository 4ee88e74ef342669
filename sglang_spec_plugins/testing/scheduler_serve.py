"""Serve requests through SGLang's real ``Scheduler`` on a CPU.

``python -m sglang_spec_plugins.testing.scheduler_serve [ALGORITHM] [--ndt N]
[--max-new-tokens N[,N,N]] [--late-after K] [--model DIR] [--draft DIR]
[--config PLUGINS_TOML] [--requests FILE] [--overlap] [--tokenizer] [--seed N]
[--worker module:Class] [--server-args JSON] [--prompts FILE]``
(``--max-new-tokens``: one for every request of :data:`PROMPTS`, or one per
request in order: requests that finish at different steps make the batch
shrink; ``--late-after K``: the last request is sent only once ``K`` verify
steps have run, so it joins a running batch; ``--model``/``--draft``: the
target and ``--speculative-draft-model-path`` folders, see
:func:`.scheduler_start.make_scheduler`; ``--config``: the plugins.toml to
load; ``--requests``: a JSON file of request specs (:func:`request`) served
instead of :data:`PROMPTS`; ``--overlap``: SGLang's overlap scheduler, as a
server runs by default; ``--tokenizer``: the tiny Llama with a byte-level
tokenizer, which grammars need (:func:`.scheduler_start.write_byte_tokenizer`);
``--seed``: torch's seed, for sampled requests; ``--worker``: the algorithm's
worker replaced by that class; ``--server-args``: server arguments added; ``--prompts``: the greedy
requests of a prompts file of ``tools/gpu/train``, :func:`read_prompts`)
makes the installed release's
real ``Scheduler`` on the tiny random Llama of :mod:`.scheduler_start`
(``ALGORITHM`` left out: no speculative decoding; ``DFLASH``: SGLang's own,
with the CPU stand-ins of :mod:`.native_dflash`), float32 on SGLang's
``triton`` attention backend (its Triton kernels run under
``TRITON_INTERPRET=1``), then serves the requests the way a server does: they
go, as ``TokenizedGenerateReqInput`` objects, through the ZMQ socket the
tokenizer manager binds (all but a late one before the scheduler's loop
starts, so that the batches, and the draws of sampled requests, are the same
on every run), and the release's own event loop (``run_event_loop``, in a
thread of this process) receives them, schedules, runs and processes each
batch and sends ``BatchTokenIDOutput`` to the sockets the tokenizer manager
and the detokenizer bind, where they are read back. Nothing of the loop is replaced.

It prints one JSON line: per request the output tokens, their logprobs where
asked (``logprobs``: each token's; ``top_logprobs``: ``[[value, id], ...]`` per
token; ``token_ids_logprobs``), SGLang's own ``completion_tokens``,
``spec_verify_ct`` (verify forwards) and finish reason; the ``verify_steps``,
``[batch size, tokens per request]`` of every TARGET_VERIFY ``ForwardBatch``
the target's model runner ran, in order (``draft_verify_steps``: those of
the speculative worker's own draft runner, where it has one that runs
them: a worker with a draft model); the ``chosen_widths``, ``[batch
size, width]`` of every answer the worker's
:class:`~sglang_spec_plugins.worker.StepWidths` gave, in order; the ``log``:
every warning and error this package logged while serving; and the wall
time; or the error. One process per run (see :mod:`.scheduler_start`):
:func:`serve_in_a_process` runs one and reads its result.
"""

from __future__ import annotations

import inspect
from array import array
import json
import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .scheduler_start import make_scheduler

PROMPTS = {
    "repetitive": [5, 17, 33, 48, 61, 5, 17, 33, 48, 61, 5, 17, 33, 48, 61, 5, 17, 33, 48, 61],
    "mixed": [9, 200, 14, 77, 130, 41, 9, 200, 14, 250, 3, 88, 160, 41, 9, 200, 14, 77, 12, 99],
    "random": [101, 7, 222, 45, 190, 66, 13, 241, 80, 155, 31, 172, 94, 208, 57, 119, 26, 233, 140, 71],
}
"""Token ids (vocabulary 256). ``repetitive`` repeats a 5-token phrase."""

TIMEOUT_S = 600


def read_prompts(path: Union[str, os.PathLike], max_new_tokens: int = 20) -> List[Dict[str, Any]]:
    """Greedy requests (:func:`request`) of a prompts file of ``tools/gpu/train``
    (``{"kinds": {KIND: [token ids, ...]}}``), named ``KIND-i``, kind after kind."""
    kinds = json.loads(Path(path).read_text())["kinds"]
    return [request(f"{kind}-{i}", ids, max_new_tokens) for kind, found in kinds.items() for i, ids in enumerate(found)]


def overlap_on_a_cpu() -> bool:
    """Whether the installed release's overlap scheduler can drive a speculative worker on a CPU: its
    ``FutureMap._resolve_spec_extras`` leaves ``record_stream`` out for CPU tensors (0.5.23; before, it
    calls it on every tensor and torch rejects a CPU one: "unknown parameter type"). Read off the source."""
    from ..engine.probe import method_source

    found = method_source("sglang.srt.managers.overlap_utils", "FutureMap._resolve_spec_extras") or ""
    return "record_stream" not in found or '"cpu"' in found


def request(rid: str, input_ids: Sequence[int], max_new_tokens: int = 20, **options: Any) -> Dict[str, Any]:
    """A request spec, as :func:`serve` and ``--requests`` take it: ``options`` are
    SGLang's sampling parameters (``temperature``, ``top_p``, ``top_k``, ``min_p``,
    the penalties, ``min_new_tokens``, ``logit_bias``, ``json_schema``, ``regex``,
    ...) and ``return_logprob``, ``top_logprobs_num``, ``token_ids_logprob``;
    EOS is ignored unless ``ignore_eos`` is given."""
    return {"rid": rid, "input_ids": list(input_ids), "max_new_tokens": max_new_tokens, **options}


def greedy_requests(max_new_tokens: Union[int, Sequence[int]] = 20) -> List[Dict[str, Any]]:
    """:data:`PROMPTS` as greedy requests, ``max_new_tokens`` each or one per request in order."""
    lengths = [max_new_tokens] * len(PROMPTS) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(lengths) != len(PROMPTS):
        raise ValueError(f"max_new_tokens: one for every request or {len(PROMPTS)}, got {max_new_tokens!r}")
    return [request(rid, tokens, length) for (rid, tokens), length in zip(PROMPTS.items(), lengths)]


def serve(algorithm: Optional[str], ndt: int = 4, max_new_tokens: Union[int, Sequence[int]] = 20,
          late_after: Optional[int] = None, model: Optional[str] = None, draft: Optional[str] = None,
          config: Optional[str] = None, requests: Optional[Sequence[Dict[str, Any]]] = None, overlap: bool = False,
          tokenizer: bool = False, seed: int = 0, worker: Optional[str] = None,
          **server_args: Any) -> Dict[str, Any]:
    """Serve ``requests`` (:func:`request` specs; default :func:`greedy_requests` of
    ``max_new_tokens``), the last one sent after ``late_after`` verify steps,
    through the real scheduler, on the ``model`` and ``draft`` folders with the
    ``config`` plugins.toml where given, with SGLang's ``overlap`` scheduler or
    without it, with a byte-level ``tokenizer`` (grammars need one), the
    algorithm's worker replaced by ``worker`` (``module:Class``) where given and
    ``server_args`` added to the harness's; the result described in the module doc."""
    import torch
    import zmq

    specs = list(requests) if requests is not None else greedy_requests(max_new_tokens)
    sockets: Dict[str, Any] = {}
    if config is not None:
        os.environ["SGLANG_SPEC_PLUGINS_CONFIG"] = str(config)
    torch.manual_seed(seed)
    began = time.monotonic()
    try:
        scheduler = make_scheduler(algorithm, worker, ndt=ndt, before_init=lambda port_args: bind(port_args, sockets),
                                   model=model, draft=draft, tokenizer=tokenizer, **{
                                       "attention_backend": "triton", "dtype": "float32", "disable_radix_cache": True,
                                       "disable_overlap_schedule": not overlap, **server_args})
    except Exception as exc:
        return {"served": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}
    started = time.monotonic()
    logged = _record_log()
    verify_tokens: List[List[int]] = []
    verify_steps = _record_verify_steps(scheduler.tp_worker.model_runner, verify_tokens)
    draft_runner = getattr(getattr(scheduler, "draft_worker", None), "draft_runner", None)
    draft_verify_steps = _record_verify_steps(draft_runner) if callable(getattr(draft_runner, "forward", None)) else []
    chosen_widths, stop_recording = _record_chosen_widths()

    try:
        inputs = [_request(**spec, tokenizer=getattr(scheduler, "tokenizer", None)) for spec in specs]
        late = [inputs.pop()] if late_after is not None else []
        for one in inputs:
            sockets["to_scheduler"].send_pyobj(one)
        time.sleep(0.2)  # delivered before the loop's first receive: the same first batch on every run
        failure = run_event_loop(scheduler)
        results: Dict[str, Dict[str, Any]] = {}
        poller = zmq.Poller()
        for name in ("from_scheduler", "to_detokenizer"):
            poller.register(sockets[name], zmq.POLLIN)
        while len([r for r in results.values() if r.get("done")]) < len(specs) and not failure \
                and time.monotonic() - started < TIMEOUT_S:
            if late and len(verify_steps) >= late_after:
                sockets["to_scheduler"].send_pyobj(late.pop())
            for socket, _ in poller.poll(20 if late else 200):
                out = socket.recv_pyobj()
                if type(out).__name__ == "BatchTokenIDOutput":
                    _collect(out, results)
    finally:
        stop_recording()
    finished = {rid: r for rid, r in results.items() if r.get("done")}
    return {"served": len(finished) == len(specs) and not failure, "error": failure[0] if failure else None,
            "requests": finished, "verify_steps": verify_steps, "draft_verify_steps": draft_verify_steps,
            "verify_tokens": verify_tokens,
            "chosen_widths": chosen_widths, "log": logged,
            "init_s": round(started - began, 1),
            "serve_s": round(time.monotonic() - started, 1)}


def _collect(out: Any, results: Dict[str, Dict[str, Any]]) -> None:
    """One ``BatchTokenIDOutput``'s tokens, logprobs and finish states into ``results`` by rid."""
    for i, rid in enumerate(out.rids):
        entry = results.setdefault(rid, {"output_ids": []})
        entry["output_ids"].extend(int(t) for t in out.output_ids[i])
        for field, key in (("output_token_logprobs_val", "logprobs"), ("output_top_logprobs_val", "top_logprobs"),
                           ("output_token_ids_logprobs_val", "token_ids_logprobs")):
            values = getattr(out, field, None)
            if values and values[i]:
                ids = getattr(out, field.replace("_val", "_idx"))[i]
                pairs = ([[float(v), int(t)] for v, t in zip(values[i], ids)] if key == "logprobs" else
                         [[[float(v), int(t)] for v, t in zip(vs, ts)] if vs else [] for vs, ts in zip(values[i], ids)])
                entry.setdefault(key, []).extend(pairs)
        if out.finished_reasons[i] is not None:
            entry["done"] = True
            entry["finish"] = out.finished_reasons[i]
            entry["completion_tokens"] = int(out.completion_tokens[i])
            verify = getattr(out, "spec_verify_ct", None)
            entry["spec_verify_ct"] = int(verify[i]) if verify else 0


def serve_in_a_process(algorithm: Optional[str], config: Union[str, os.PathLike], ndt: int = 4,
                       max_new_tokens: Union[int, Sequence[int]] = 20, late_after: Optional[int] = None,
                       model: Optional[str] = None, draft: Optional[str] = None, python: str = sys.executable,
                       env: Optional[Dict[str, str]] = None, timeout: int = 900,
                       requests: Optional[Sequence[Dict[str, Any]]] = None, overlap: bool = False,
                       tokenizer: bool = False, seed: int = 0, worker: Optional[str] = None,
                       server_args: Optional[Dict[str, Any]] = None,
                       prompts: Optional[Union[str, os.PathLike]] = None) -> Dict[str, Any]:
    """:func:`serve` in a process of its own, ``python -m`` this module with the ``config``
    plugins.toml (one scheduler per process): its result. ``env``: the process's environment
    (default: this one's, ``PYTHONPATH`` this ``sys.path``); ``SGLANG_SPEC_PLUGINS`` is left out,
    so the config says which plugins load. ``server_args``: JSON-able server arguments added;
    ``prompts``: a prompts file served as greedy requests (:func:`read_prompts`).
    RuntimeError with the process's output where it printed no result."""
    import subprocess

    if env is None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env = {k: v for k, v in env.items() if k != "SGLANG_SPEC_PLUGINS"}
    lengths = [max_new_tokens] if isinstance(max_new_tokens, int) else list(max_new_tokens)
    command = [str(python), "-m", "sglang_spec_plugins.testing.scheduler_serve", *([algorithm] if algorithm else []), "--ndt", str(ndt),
               "--max-new-tokens", ",".join(map(str, lengths)), "--config", str(config),
               *(["--late-after", str(late_after)] if late_after is not None else []),
               *(["--model", str(model)] if model else []), *(["--draft", str(draft)] if draft else []),
               *(["--overlap"] if overlap else []), *(["--tokenizer"] if tokenizer else []), "--seed", str(seed),
               *(["--worker", worker] if worker else []),
               *(["--server-args", json.dumps(server_args)] if server_args else []),
               *(["--prompts", str(prompts)] if prompts else [])]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as listed:
        json.dump(requests, listed)
    if requests is not None:
        command += ["--requests", listed.name]
    try:
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        os.unlink(listed.name)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"no result (rc {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return json.loads(lines[-1])


def run_event_loop(scheduler) -> List[str]:
    """Start the scheduler's own loop in a daemon thread, as its process starts it
    (``run_event_loop``: the overlap loop where overlap is on; before it, the
    loop of that name); the list returned gets its traceback if it raises (the
    caller stops waiting)."""
    failure: List[str] = []
    own = getattr(scheduler, "run_event_loop", None)
    if own is None:
        own = scheduler.event_loop_overlap if scheduler.enable_overlap else scheduler.event_loop_normal

    def loop():
        try:
            own()
        except BaseException:
            failure.append(traceback.format_exc()[-4000:])

    threading.Thread(target=loop, daemon=True).start()
    return failure


def bind(port_args, sockets: Dict[str, Any]) -> None:
    """Bind, into ``sockets``, what the tokenizer manager and the detokenizer bind:
    ``to_scheduler`` (requests), ``from_scheduler`` (with ``skip_tokenizer_init``
    the scheduler sends its outputs straight there) and ``to_detokenizer`` (with a tokenizer)."""
    import zmq
    from sglang.srt.utils.network import get_zmq_socket  # after make_scheduler's stand-ins

    context = zmq.Context(2)
    sockets["to_scheduler"] = get_zmq_socket(context, zmq.PUSH, port_args.scheduler_input_ipc_name, True)
    sockets["from_scheduler"] = get_zmq_socket(context, zmq.PULL, port_args.tokenizer_ipc_name, True)
    sockets["to_detokenizer"] = get_zmq_socket(context, zmq.PULL, port_args.detokenizer_ipc_name, True)


def _record_verify_steps(model_runner, tokens: Optional[List[List[int]]] = None) -> List[List[int]]:
    """A list that gets ``[batch size, tokens per request]`` of every
    TARGET_VERIFY ``ForwardBatch`` ``model_runner.forward`` runs from now on
    (and ``tokens``, where given, each one's input token ids: the verified chains)."""
    steps: List[List[int]] = []
    forward = model_runner.forward

    def recording(forward_batch, *args, **kwargs):
        if forward_batch.forward_mode.is_target_verify():
            steps.append([forward_batch.batch_size, forward_batch.input_ids.shape[0] // forward_batch.batch_size])
            if tokens is not None:
                tokens.append([int(t) for t in forward_batch.input_ids.tolist()])
        return forward(forward_batch, *args, **kwargs)

    model_runner.forward = recording
    return steps


def _record_log() -> List[str]:
    """A list that gets every warning and error this package logs from now on (as formatted)."""
    import logging

    lines: List[str] = []

    class Kept(logging.Handler):
        def emit(self, record):
            lines.append(f"{record.levelname} {record.getMessage()}")

    handler = Kept(logging.WARNING)
    logging.getLogger("sglang_spec_plugins").addHandler(handler)
    return lines


def _record_chosen_widths() -> Tuple[List[List[int]], Callable[[], None]]:
    """A list that gets ``[batch size, width]`` of every ``StepWidths.at`` answer until the returned
    function is called (it puts ``StepWidths.at`` back)."""
    from ..worker import StepWidths

    chosen: List[List[int]] = []
    at = StepWidths.at

    def recording(self, batch_size, width=None):
        answer = at(self, batch_size, width)
        chosen.append([batch_size, answer])
        return answer

    StepWidths.at = recording

    def stop() -> None:
        StepWidths.at = at

    return chosen, stop


def _request(rid: str, input_ids: Sequence[int], max_new_tokens: int, return_logprob: bool = False,
             top_logprobs_num: int = 0, token_ids_logprob: Optional[List[int]] = None, stream: bool = False,
             tokenizer: Any = None, **sampling: Any):
    """The ``TokenizedGenerateReqInput`` the tokenizer manager sends for a request of
    token ids (fields by the installed release's signature); ``sampling``: SGLang's
    sampling parameters, greedy (``temperature`` 0) and EOS ignored unless given,
    normalised with ``tokenizer`` (the server's, where it has one)."""
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    sampling = {"temperature": 0.0, "ignore_eos": True, **sampling}
    params = SamplingParams(max_new_tokens=max_new_tokens, **sampling)
    params.normalize(tokenizer)
    tokens = list(input_ids)
    values = dict(rid=rid, input_text=None, input_ids=tokens, sampling_params=params, return_logprob=return_logprob,
                  logprob_start_len=-1, top_logprobs_num=top_logprobs_num, token_ids_logprob=token_ids_logprob,
                  stream=stream)
    parameters = inspect.signature(TokenizedGenerateReqInput).parameters
    if "array" in str(parameters["input_ids"].annotation):  # 0.5.2x: token ids travel as array("q")
        values["input_ids"] = array("q", tokens)
    fields = {name: values.get(name) for name, p in parameters.items()
              if p.default is inspect.Parameter.empty or name in values}
    return TokenizedGenerateReqInput(**fields)


def main(argv: List[str]) -> int:
    algorithm = argv[0] if argv and not argv[0].startswith("--") else None
    flags = {"--overlap", "--tokenizer"}
    rest = argv[1 if algorithm else 0:]
    switches = {a for a in rest if a in flags}
    values = [a for a in rest if a not in flags]
    options = dict(zip(values[0::2], values[1::2]))
    lengths = [int(n) for n in options.get("--max-new-tokens", "20").split(",")]
    late_after = options.get("--late-after")
    listed = options.get("--requests")
    requests = json.loads(Path(listed).read_text()) if listed else None
    if "--prompts" in options:
        requests = read_prompts(options["--prompts"], lengths[0])
    result = serve(algorithm, ndt=int(options.get("--ndt", 4)), max_new_tokens=lengths[0] if len(lengths) == 1 else lengths,
                   late_after=None if late_after is None else int(late_after), model=options.get("--model"),
                   draft=options.get("--draft"), config=options.get("--config"), requests=requests,
                   overlap="--overlap" in switches, tokenizer="--tokenizer" in switches,
                   seed=int(options.get("--seed", 0)), worker=options.get("--worker"),
                   **json.loads(options.get("--server-args", "{}")))
    print(json.dumps(result), flush=True)
    sys.stdout.flush()
    os._exit(0)  # the scheduler's loop thread and sockets would keep the process alive


if __name__ == "__main__":
    main(sys.argv[1:])
