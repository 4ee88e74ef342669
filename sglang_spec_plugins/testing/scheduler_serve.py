"""Serve a few greedy requests through SGLang's real ``Scheduler`` on a CPU.

``python -m sglang_spec_plugins.testing.scheduler_serve [ALGORITHM] [--ndt N]
[--max-new-tokens N[,N,N]] [--late-after K] [--model DIR] [--draft DIR]
[--config PLUGINS_TOML] [--prompts FILE]`` (``--max-new-tokens``: one for every request, or
one per request of :data:`PROMPTS` in order: requests that finish at
different steps make the batch shrink; ``--late-after K``: the last request
is sent only once ``K`` verify steps have run, so it joins a running batch;
``--model``/``--draft``: the target and ``--speculative-draft-model-path``
folders, see :func:`.scheduler_start.make_scheduler`; ``--config``: the
plugins.toml to load; ``--prompts``: the requests instead of :data:`PROMPTS`,
a prompts file of ``tools/gpu/train`` (:func:`read_prompts`)) makes the installed release's real ``Scheduler`` on the
tiny random Llama of :mod:`.scheduler_start` (``ALGORITHM`` left out: no
speculative decoding; ``DFLASH``: SGLang's own, with the CPU stand-ins of
:mod:`.native_dflash`), float32 on SGLang's ``triton`` attention backend (its
Triton kernels run under ``TRITON_INTERPRET=1``), then serves
:data:`PROMPTS` the way a server does: the requests go, as
``TokenizedGenerateReqInput`` objects, through the ZMQ socket the tokenizer
manager binds, and the release's own ``event_loop_normal`` (in a thread of
this process) receives them, schedules, runs and processes each batch and
sends ``BatchTokenIDOutput`` to the socket the tokenizer manager binds (with
``skip_tokenizer_init`` there is no detokenizer), where they are read back. Nothing of the loop is replaced.

It prints one JSON line: per request the output tokens, SGLang's own
``completion_tokens`` and ``spec_verify_ct`` (verify forwards); the
``verify_steps``, ``[batch size, tokens per request]`` of every TARGET_VERIFY
``ForwardBatch`` the target's model runner ran, in order; the
``chosen_widths``, ``[batch size, width]`` of every answer the worker's
:class:`~sglang_spec_plugins.worker.StepWidths` gave, in order; and the wall
time; or the error. One process per run (see :mod:`.scheduler_start`):
:func:`serve_in_a_process` runs one and reads its result.
"""

from __future__ import annotations

import inspect
from array import array
import json
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .scheduler_start import make_scheduler

PROMPTS = {
    "repetitive": [5, 17, 33, 48, 61, 5, 17, 33, 48, 61, 5, 17, 33, 48, 61, 5, 17, 33, 48, 61],
    "mixed": [9, 200, 14, 77, 130, 41, 9, 200, 14, 250, 3, 88, 160, 41, 9, 200, 14, 77, 12, 99],
    "random": [101, 7, 222, 45, 190, 66, 13, 241, 80, 155, 31, 172, 94, 208, 57, 119, 26, 233, 140, 71],
}
"""Token ids (vocabulary 256). ``repetitive`` repeats a 5-token phrase."""

TIMEOUT_S = 600


def read_prompts(path: Union[str, os.PathLike]) -> Dict[str, List[int]]:
    """The requests of a prompts file of ``tools/gpu/train`` (``{"kinds": {KIND: [token ids, ...]}}``), named
    ``KIND-i``, kind after kind."""
    with open(path) as f:
        kinds = json.load(f)["kinds"]
    return {f"{kind}-{i}": list(ids) for kind, found in kinds.items() for i, ids in enumerate(found)}


def serve(algorithm: Optional[str], ndt: int = 4, max_new_tokens: Union[int, Sequence[int]] = 20,
          late_after: Optional[int] = None, model: Optional[str] = None, draft: Optional[str] = None,
          config: Optional[str] = None, prompts: Optional[Dict[str, List[int]]] = None) -> Dict[str, Any]:
    """Serve ``prompts`` (default :data:`PROMPTS`; greedy, EOS ignored; ``max_new_tokens`` each, or
    one per request in order; the last one sent after ``late_after`` verify
    steps) through the real scheduler, on the ``model`` and ``draft`` folders
    with the ``config`` plugins.toml where given; the result described in the
    module doc."""
    prompts = PROMPTS if prompts is None else prompts
    lengths = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(lengths) != len(prompts):
        raise ValueError(f"max_new_tokens: one for every request or {len(prompts)}, got {max_new_tokens!r}")
    import zmq

    sockets: Dict[str, Any] = {}
    if config is not None:
        os.environ["SGLANG_SPEC_PLUGINS_CONFIG"] = str(config)
    began = time.monotonic()
    try:
        scheduler = make_scheduler(algorithm, ndt=ndt, before_init=lambda port_args: bind(port_args, sockets),
                                   model=model, draft=draft,
                                   attention_backend="triton", dtype="float32", disable_radix_cache=True)
    except Exception as exc:
        return {"served": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}
    started = time.monotonic()
    verify_tokens: List[List[int]] = []
    verify_steps = _record_verify_steps(scheduler.tp_worker.model_runner, verify_tokens)
    chosen_widths, stop_recording = _record_chosen_widths()

    try:
        failure = run_event_loop(scheduler)
        requests = [_request(rid, tokens, length) for (rid, tokens), length in zip(prompts.items(), lengths)]
        late = [requests.pop()] if late_after is not None else []
        for request in requests:
            sockets["to_scheduler"].send_pyobj(request)
        results: Dict[str, Dict[str, Any]] = {}
        poller = zmq.Poller()
        poller.register(sockets["from_scheduler"], zmq.POLLIN)
        while len(results) < len(prompts) and not failure and time.monotonic() - started < TIMEOUT_S:
            if late and len(verify_steps) >= late_after:
                sockets["to_scheduler"].send_pyobj(late.pop())
            if not poller.poll(20 if late else 200):
                continue
            out = sockets["from_scheduler"].recv_pyobj()
            if type(out).__name__ != "BatchTokenIDOutput":
                continue
            for i, rid in enumerate(out.rids):
                entry = results.setdefault(rid, {"output_ids": []})
                entry["output_ids"].extend(int(t) for t in out.output_ids[i])
                if out.finished_reasons[i] is not None:
                    entry["done"] = True
                    entry["completion_tokens"] = int(out.completion_tokens[i])
                    verify = getattr(out, "spec_verify_ct", None)
                    entry["spec_verify_ct"] = int(verify[i]) if verify else 0
    finally:
        stop_recording()
    finished = {rid: r for rid, r in results.items() if r.get("done")}
    return {"served": len(finished) == len(prompts) and not failure, "error": failure[0] if failure else None,
            "requests": finished, "verify_steps": verify_steps, "verify_tokens": verify_tokens,
            "chosen_widths": chosen_widths,
            "init_s": round(started - began, 1),
            "serve_s": round(time.monotonic() - started, 1)}


def serve_in_a_process(algorithm: Optional[str], config: Union[str, os.PathLike], ndt: int = 4,
                       max_new_tokens: Union[int, Sequence[int]] = 20, late_after: Optional[int] = None,
                       model: Optional[str] = None, draft: Optional[str] = None, python: str = sys.executable,
                       env: Optional[Dict[str, str]] = None, timeout: int = 900,
                       prompts: Optional[Union[str, os.PathLike]] = None) -> Dict[str, Any]:
    """:func:`serve` in a process of its own, ``python -m`` this module with the ``config``
    plugins.toml (one scheduler per process; ``prompts``: a prompts file, :func:`read_prompts`): its result. ``env``: the process's environment
    (default: this one's, ``PYTHONPATH`` this ``sys.path``); ``SGLANG_SPEC_PLUGINS`` is left out,
    so the config says which plugins load. RuntimeError with the process's output where it printed
    no result."""
    import subprocess

    if env is None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env = {k: v for k, v in env.items() if k != "SGLANG_SPEC_PLUGINS"}
    lengths = [max_new_tokens] if isinstance(max_new_tokens, int) else list(max_new_tokens)
    command = [str(python), "-m", "sglang_spec_plugins.testing.scheduler_serve", *([algorithm] if algorithm else []), "--ndt", str(ndt),
               "--max-new-tokens", ",".join(map(str, lengths)), "--config", str(config),
               *(["--late-after", str(late_after)] if late_after is not None else []),
               *(["--model", str(model)] if model else []), *(["--draft", str(draft)] if draft else []),
               *(["--prompts", str(prompts)] if prompts else [])]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"no result (rc {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return json.loads(lines[-1])


def run_event_loop(scheduler) -> List[str]:
    """Start the scheduler's own ``event_loop_normal`` in a daemon thread; the
    list returned gets its traceback if it raises (the caller stops waiting)."""
    failure: List[str] = []

    def loop():
        try:
            scheduler.event_loop_normal()
        except BaseException:
            failure.append(traceback.format_exc()[-4000:])

    threading.Thread(target=loop, daemon=True).start()
    return failure


def bind(port_args, sockets: Dict[str, Any]) -> None:
    """Bind, into ``sockets``, what the tokenizer manager binds: ``to_scheduler``
    (requests) and ``from_scheduler`` (with ``skip_tokenizer_init`` there is no
    detokenizer: the scheduler sends its outputs straight there)."""
    import zmq
    from sglang.srt.utils.network import get_zmq_socket  # after make_scheduler's stand-ins

    context = zmq.Context(2)
    sockets["to_scheduler"] = get_zmq_socket(context, zmq.PUSH, port_args.scheduler_input_ipc_name, True)
    sockets["from_scheduler"] = get_zmq_socket(context, zmq.PULL, port_args.tokenizer_ipc_name, True)


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


def _request(rid: str, tokens: List[int], max_new_tokens: int, temperature: float = 0.0, return_logprob: bool = False,
             stream: bool = False):
    """The ``TokenizedGenerateReqInput`` the tokenizer manager sends for a
    request of token ids, EOS ignored (fields by the installed release's signature)."""
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, ignore_eos=True)
    params.normalize(None)
    values = dict(rid=rid, input_text=None, input_ids=list(tokens), sampling_params=params, return_logprob=return_logprob,
                  logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, stream=stream)
    parameters = inspect.signature(TokenizedGenerateReqInput).parameters
    if "array" in str(parameters["input_ids"].annotation):  # 0.5.2x: token ids travel as array("q")
        values["input_ids"] = array("q", tokens)
    fields = {name: values.get(name) for name, p in parameters.items()
              if p.default is inspect.Parameter.empty or name in values}
    return TokenizedGenerateReqInput(**fields)


def main(argv: List[str]) -> int:
    algorithm = argv[0] if argv and not argv[0].startswith("--") else None
    options = dict(zip(argv[1 if algorithm else 0::2], argv[2 if algorithm else 1::2]))
    lengths = [int(n) for n in options.get("--max-new-tokens", "20").split(",")]
    late_after = options.get("--late-after")
    result = serve(algorithm, ndt=int(options.get("--ndt", 4)), max_new_tokens=lengths[0] if len(lengths) == 1 else lengths,
                   late_after=None if late_after is None else int(late_after), model=options.get("--model"),
                   draft=options.get("--draft"), config=options.get("--config"),
                   prompts=read_prompts(options["--prompts"]) if "--prompts" in options else None)
    print(json.dumps(result), flush=True)
    sys.stdout.flush()
    os._exit(0)  # the scheduler's loop thread and sockets would keep the process alive


if __name__ == "__main__":
    main(sys.argv[1:])
