"""Start one real ``sglang.Engine`` and generate greedily; one JSON line of results.

usage: python3 engine_check.py LABEL --backend triton|flashinfer [--no-cuda-graph] [--deterministic]
           [--dtype auto|float16|float32] [--staggered] [--model DIR] [--draft DIR]
           [--spec NAME --ndt N] [--tp N] [--batches 1,8,32] [--new-tokens 64] [--timing [--rounds N]]
           [--prompts FILE [--min-requests N]] [--overlap auto|on|off] [--sampling greedy|sampled]
           [--max-running N] [--profile 1,32 [--profile-steps N]]

``--model``: the target folder (default ``$ENGINE_MODEL``); one holding only a
``config.json`` is served with ``--load-format dummy``. ``--draft``: the
``--speculative-draft-model-path`` folder (DFLASH, DFLASH_BLOCK), likewise with
``--speculative-draft-load-format dummy`` when it holds no weights.

With ``--spec`` the algorithm is served with ``--speculative-num-draft-tokens``
``N`` and overlap scheduling off; the plugin's own settings come from
plugins.toml (``SGLANG_SPEC_PLUGINS_CONFIG``). ``--overlap on`` leaves
SGLang's overlap scheduler as SGLang sets it (its default: on), ``off`` turns it
off (``--disable-overlap-schedule``), ``auto`` (the default) is off with
``--spec`` and SGLang's default without; the record's ``overlap`` is what the
engine's resolved server arguments say. For every batch size two prompt
sets are generated: repetitive prompts (a random phrase said over and over:
prompt lookup finds its continuation) and random ones; with ``--prompts FILE``
(``{"kinds": {KIND: [token ids, ...]}}``, ``tools/gpu/train``'s ``prompts.json``)
each kind of the file instead, a batch of ``B`` its first ``B`` prompts, and a
batch smaller than ``--min-requests`` sent again on the next prompts until
that many requests ran, one batch after another (:func:`cell_batches`). Each
result line holds the output token ids (compared across engines by
``compare.py``), the speculative counters SGLang reports per request, and with
``--timing`` the tokens per second of each batch size (a warm-up batch first;
with ``--prompts`` the untimed pass is the warm-up), timed ``--rounds`` times,
each round every batch size and kind once in turn: the record keeps every
round's tokens per second and the median round's figures.
``--sampling sampled``: every request at temperature 0.7, top-p 0.9 (greedy
otherwise). ``--max-running N``: SGLang's ``--max-running-requests`` (0.5.16
sets 48 for speculative engines left without it, so a batch of 64 is not one
batch there).

``--profile BATCHES``: after everything else, for each batch size one batch
of the first prompt kind under SGLang's own profiler (``Engine.start_profile``,
CPU and GPU, Python stacks), ``--profile-steps`` forward steps from the next
one; each trace SGLang writes is kept as ``$OUT/profiles/LABEL_bBATCH.trace.json.gz``
(``trace_steps.py`` reads it).

``--deterministic`` starts the engine with SGLang's
``--enable-deterministic-inference``: batch-invariant matmuls and attention
split sizes, so that a token's logits do not depend on how many other rows
(requests, or a request's other verified tokens) the step carries. Without
it, a decode step and a verify step reach the same logits through kernels
that sum in another order, and on a near-tie greedy decoding may go either
way; with it, a speculative engine that commits the right tokens must give
exactly the plain engine's outputs.

``--staggered`` gives the requests of a batch different lengths (64, 58, ...,
22 new tokens, over and over), so that a batch shrinks while it decodes and
a speculative engine with widths by batch size switches width mid-run.

``--dtype`` serves the (bf16) model in another precision (SGLang's
``--dtype``; ``auto`` keeps bf16). The logits of a random model have many
near-ties at bf16's resolution (a logit of 40 is rounded to a multiple of
0.25), which any change of kernel flips; float16 has 8 times the resolution,
and float32 on triton (with ``TRITON_F32_DEFAULT=ieee``, so that ``tl.dot``
does not round to tf32) leaves no near-ties that a kernel's summation order
reaches.

Everything runs under the ``__main__`` guard: SGLang spawns its scheduler,
which imports this file again.
"""

import argparse
import json
import os
import random
import sys
import time

PHRASE_LEN, PHRASE_REPEATS, RANDOM_PROMPT_LEN, VOCAB = 8, 6, 48, 32000


def prompts(kind: str, count: int, seed: int):
    """``count`` prompts of ``kind`` (repetitive|random), the same for every engine (no prompts file)."""
    rng = random.Random(f"{kind}-{seed}")
    out = []
    for _ in range(count):
        if kind == "repetitive":
            phrase = [rng.randrange(5, VOCAB) for _ in range(PHRASE_LEN)]
            out.append([1] + phrase * PHRASE_REPEATS)
        else:
            out.append([1] + [rng.randrange(5, VOCAB) for _ in range(RANDOM_PROMPT_LEN)])
    return out


def prompt_file(path):
    """The prompt kinds of a ``--prompts`` file: ``{kind: [token ids, ...]}``."""
    with open(path) as f:
        return json.load(f)["kinds"]


def kinds_of(source):
    """The prompt kinds: those of a prompts file (``source``), else repetitive and random."""
    return list(source) if source else ["repetitive", "random"]


def cell_batches(source, kind: str, batch: int, seed: int, min_requests: int = 1):
    """The batches one (batch size, kind) sends, in order: from a prompts file (``source``), the first
    ``batch`` prompts of ``kind``, and so on through the file (cycling) until ``min_requests`` ran; else
    :func:`prompts` of ``seed``."""
    if not source:
        return [prompts(kind, batch, seed)]
    found = source[kind]
    calls = -(-max(batch, min_requests) // batch)
    return [[found[(c * batch + i) % len(found)] for i in range(batch)] for c in range(calls)]


def _has_weights(folder):
    return any(name.endswith(".safetensors") for name in os.listdir(folder))


def engine_kwargs(args):
    model = args.model or os.environ.get("ENGINE_MODEL", "/tmp/tiny-llama")
    kwargs = dict(
        model_path=model,
        skip_tokenizer_init=not args.kinds, attention_backend=args.backend, tp_size=args.tp,
        mem_fraction_static=0.3, max_total_tokens=65536, disable_radix_cache=True,
        cuda_graph_max_bs_decode=max(args.batches), cuda_graph_max_bs_prefill=64,
        random_seed=0, log_level="info",
        disable_prefill_cuda_graph=True,  # prefill graphs are not what is checked; their first capture takes 80-130 s
    )
    if not _has_weights(model):
        kwargs["load_format"] = "dummy"
    if not args.cuda_graph:
        kwargs["disable_cuda_graph"] = True
    if args.deterministic:
        kwargs["enable_deterministic_inference"] = True
    if args.dtype != "auto":
        kwargs["dtype"] = args.dtype
    if args.overlap == "off" or (args.overlap == "auto" and args.spec):
        kwargs["disable_overlap_schedule"] = True
    if args.max_running:
        kwargs["max_running_requests"] = args.max_running
    if args.spec:
        kwargs.update(speculative_algorithm=args.spec, speculative_num_draft_tokens=args.ndt)
        if args.spec == "NGRAM":
            kwargs.update(speculative_eagle_topk=1, speculative_num_steps=args.ndt - 1)
        if args.draft:
            kwargs["speculative_draft_model_path"] = args.draft
            if not _has_weights(args.draft):
                kwargs["speculative_draft_load_format"] = "dummy"
    return kwargs


def spec_counters(outputs):
    meta = [o.get("meta_info", {}) for o in outputs]
    verify = [m.get("spec_verify_ct") for m in meta]
    return {"spec_verify_ct": verify, "completion_tokens": [m.get("completion_tokens") for m in meta]}


SAMPLED = {"temperature": 0.7, "top_p": 0.9}
"""``--sampling sampled``: what every request asks for."""

KINDS = {
    "penalised": {"frequency_penalty": 0.5, "presence_penalty": 0.3, "repetition_penalty": 1.2},
    "min_new_tokens": {"min_new_tokens": 24, "logit_bias": {"13": 2.0, "29": -1.5}},
    "logprob": {},
    "json": {"json_schema": json.dumps({"type": "object", "properties": {"name": {"type": "string"},
                                                                         "size": {"type": "integer"}},
                                        "required": ["name", "size"]})},
    "regex": {"regex": "(def|class) [a-z_]{3,12}\\(\\):"},
    "sampled": dict(SAMPLED),
}
"""``--kinds``: the request kinds sent after the greedy cells (greedy unless they say otherwise; ``logprob``
returns each token's logprob, its 5 top logprobs and those of tokens 13 and 29; ``json`` and ``regex`` need
the model's tokenizer)."""


def kinds_stage(engine, source, new_tokens):
    """Each of :data:`KINDS` on 4 prompts: output ids, finish reasons and the logprob request's logprobs."""
    found = {}
    prompts_of = cell_batches(source, kinds_of(source)[0], 4, 77, 4)[0]
    for name, extra in KINDS.items():
        params = {"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": name not in ("json", "regex"), **extra}
        logprobs = dict(return_logprob=True, top_logprobs_num=5, token_ids_logprob=[13, 29]) if name == "logprob" else {}
        try:
            outputs = engine.generate(input_ids=prompts_of, sampling_params=params, **logprobs)
        except Exception as exc:  # noqa: BLE001 - the record says which kind failed and why
            found[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            continue
        found[name] = {"output_ids": [o.get("output_ids") for o in outputs], "text": [o.get("text") for o in outputs],
                       "finish": [str(o.get("meta_info", {}).get("finish_reason")) for o in outputs],
                       **spec_counters(outputs)}
        if logprobs:
            meta = [o.get("meta_info", {}) for o in outputs]
            found[name]["logprobs"] = [[v for v, *_ in m.get("output_token_logprobs", [])] for m in meta]
            found[name]["top_logprobs"] = [[[[v, t] for v, t, *_ in top] for top in m.get("output_top_logprobs", [])]
                                           for m in meta]
    return found


def flush_caches(engine, seconds: float = 10.0):
    """SGLang's ``flush_cache``, asked again until it succeeds: it refuses while the scheduler still finishes
    the batch before (under the overlap scheduler, a moment after ``generate`` returned)."""
    deadline = time.time() + seconds
    while not getattr(flushed := engine.flush_cache(), "success", True):
        if time.time() > deadline:
            raise RuntimeError(f"flush_cache still refused after {seconds:.0f} s: {flushed}")
        time.sleep(0.05)


def generate_cell(engine, batches, params):
    """Send ``batches`` one after the other, from empty caches; the outputs in order, the seconds they took
    together. SGLang's NGRAM drafts from a corpus of every request its engine served, kept until
    ``flush_cache`` (``NGRAMWorker.clear_cache_pool``): without the flush, a cell sent again (a timed round
    after the untimed pass) would be drafted from its own earlier outputs, as no real request is."""
    flush_caches(engine)
    outputs, started = [], time.time()
    for batch in batches:
        outputs += engine.generate(input_ids=batch, sampling_params=params(len(batch)))
    return outputs, time.time() - started


TRACE_WAIT_S = 90
"""How long :func:`profile_cell` waits for the trace SGLang's scheduler writes after its last profiled step."""


def profile_cell(engine, source, kind, batch, params, steps, label):
    """One batch of ``batch`` prompts of ``kind`` under SGLang's profiler for ``steps`` forward steps; the
    path of the trace it wrote, copied to ``$OUT/profiles`` (None: no trace came)."""
    import shutil
    import tempfile

    from trace_steps import wait_for_trace

    directory = tempfile.mkdtemp(prefix=f"profile-{label}-b{batch}-")
    flush_caches(engine)
    engine.start_profile(output_dir=directory, num_steps=steps, activities=["CPU", "GPU"], with_stack=True)
    engine.generate(input_ids=cell_batches(source, kind, batch, 2000 + batch)[0], sampling_params=params(batch))
    trace = wait_for_trace(directory, TRACE_WAIT_S)
    if trace is None:
        return None
    kept = os.path.join(os.environ.get("OUT", "."), "profiles", f"{label}_b{batch}.trace.json.gz")
    os.makedirs(os.path.dirname(kept), exist_ok=True)
    shutil.copyfile(trace, kept)
    return kept


def run(args, record):
    started = time.time()
    import sglang

    record["sglang"] = sglang.__version__
    record["import_s"] = round(time.time() - started, 1)
    kwargs = engine_kwargs(args)
    record["engine_kwargs"] = {k: v for k, v in kwargs.items() if k not in ("model_path", "speculative_draft_model_path")}
    record["stage"] = "engine_start"
    started = time.time()
    engine = sglang.Engine(**kwargs)
    record["engine_start_s"] = round(time.time() - started, 1)
    resolved = getattr(engine, "server_args", None)
    if resolved is not None:
        record["overlap"] = not resolved.disable_overlap_schedule
        record["max_running_requests"] = resolved.max_running_requests
    request = {"temperature": 0, "max_new_tokens": args.new_tokens, "ignore_eos": True}
    if args.sampling == "sampled":
        request.update(SAMPLED)

    def params(count):
        if not args.staggered:
            return request
        return [dict(request, max_new_tokens=args.new_tokens - 6 * (i % 8)) for i in range(count)]

    source = prompt_file(args.prompts) if args.prompts else None
    kinds = kinds_of(source)
    record["stage"] = "generate"
    record["runs"] = []
    for bs in args.batches:
        for kind in kinds:
            outputs, took = generate_cell(engine, cell_batches(source, kind, bs, bs, args.min_requests), params)
            record["runs"].append({
                "batch": bs, "prompts": kind, "seconds": round(took, 4),
                "output_ids": [o.get("output_ids") for o in outputs],
                "finish": [str(o.get("meta_info", {}).get("finish_reason")) for o in outputs],
                **spec_counters(outputs),
            })
    if args.timing:
        record["stage"] = "timing"
        cells = [(bs, kind, cell_batches(source, kind, bs, 1000 + bs, args.min_requests))
                 for bs in args.batches for kind in kinds]
        if source is None:
            for _, _, batches in cells:
                generate_cell(engine, batches, params)  # warm-up at this shape
        rounds = {(bs, kind): [] for bs, kind, _ in cells}
        for _ in range(args.rounds):
            for bs, kind, batches in cells:
                outputs, took = generate_cell(engine, batches, params)
                tokens = sum(len(o["output_ids"]) for o in outputs)
                rounds[(bs, kind)].append({"batch": bs, "prompts": kind, "tokens": tokens, "seconds": round(took, 4),
                                           "tokens_per_s": round(tokens / took, 1), **spec_counters(outputs)})
        record["timing"] = []
        for (bs, kind), timed in rounds.items():
            median = sorted(timed, key=lambda t: t["tokens_per_s"])[len(timed) // 2]
            record["timing"].append(dict(median, rounds=[t["tokens_per_s"] for t in timed]))
    if args.kinds:
        record["stage"] = "kinds"
        record["kinds"] = kinds_stage(engine, source, min(args.new_tokens, 48))
    if args.profile:
        record["stage"] = "profile"
        record["profiles"] = {bs: profile_cell(engine, source, kinds[0], bs, params, args.profile_steps, args.label)
                              for bs in args.profile}
    if args.sampled:
        record["stage"] = "sampled"
        outputs = engine.generate(input_ids=prompts("random", 2, seed=7),
                                  sampling_params={"temperature": 0.8, "max_new_tokens": 8})
        record["sampled"] = [{"output_ids": o.get("output_ids"), "finish": o.get("meta_info", {}).get("finish_reason")}
                             for o in outputs]
    record["stage"] = "shutdown"
    engine.shutdown()
    record["stage"] = "done"
    record["ok"] = True


def arguments() -> argparse.ArgumentParser:
    """This script's command line; ``margins.py`` parses its engine's with it too."""
    parser = argparse.ArgumentParser()
    parser.add_argument("label")
    parser.add_argument("--backend", required=True)
    parser.add_argument("--no-cuda-graph", dest="cuda_graph", action="store_false")
    parser.add_argument("--deterministic", action="store_true", help="SGLang's --enable-deterministic-inference")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float16", "float32"])
    parser.add_argument("--staggered", action="store_true", help="requests of different lengths in a batch")
    parser.add_argument("--spec")
    parser.add_argument("--model", help="the target folder (default: $ENGINE_MODEL)")
    parser.add_argument("--draft", help="--speculative-draft-model-path (a draft-model algorithm)")
    parser.add_argument("--ndt", type=int, default=4)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--rounds", type=int, default=1, help="timed rounds (each: every batch size and kind once)")
    parser.add_argument("--sampled", action="store_true", help="also send a temperature-0.8 request")
    parser.add_argument("--prompts", help='a prompts file ({"kinds": {KIND: [token ids, ...]}}) instead of generated ones')
    parser.add_argument("--min-requests", type=int, default=1,
                        help="with --prompts: batches sent per cell until this many requests ran")
    parser.add_argument("--overlap", choices=["auto", "on", "off"], default="auto",
                        help="SGLang's overlap scheduler: auto = off with --spec, SGLang's default without")
    parser.add_argument("--sampling", choices=["greedy", "sampled"], default="greedy")
    parser.add_argument("--kinds", action="store_true",
                        help="also send every request kind of KINDS (the model's tokenizer is loaded)")
    parser.add_argument("--max-running", type=int, help="--max-running-requests")
    parser.add_argument("--profile", type=lambda s: [int(x) for x in s.split(",")], default=[],
                        help="batch sizes to profile, one batch each (after everything else)")
    parser.add_argument("--profile-steps", type=int, default=16, help="forward steps each profile records")
    return parser


if __name__ == "__main__":
    args = arguments().parse_args()
    record = {"label": args.label, "backend": args.backend, "cuda_graph": args.cuda_graph,
              "deterministic": args.deterministic, "dtype": args.dtype, "staggered": args.staggered, "spec": args.spec,
              "ndt": args.ndt if args.spec else None, "tp": args.tp, "model": args.model, "draft": args.draft,
              "plugins_config": os.environ.get("SGLANG_SPEC_PLUGINS_CONFIG"), "sampling": args.sampling,
              "prompts_file": os.path.basename(args.prompts) if args.prompts else None,
              "min_requests": args.min_requests, "rounds": args.rounds, "new_tokens": args.new_tokens, "ok": False}
    process_started = time.time()
    try:
        run(args, record)
    except BaseException as exc:  # noqa: BLE001 - the record says what stopped the engine
        import traceback

        traceback.print_exc()
        record["error"] = f"{type(exc).__name__}: {str(exc)[:3000]}"
    finally:
        record["process_s"] = round(time.time() - process_started, 1)
        with open(os.path.join(os.environ.get("OUT", "."), "engines.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")
        print("RESULT", json.dumps({k: v for k, v in record.items() if k not in ("runs", "timing")}), flush=True)
        sys.stdout.flush()
        os._exit(0 if record["ok"] else 1)
