"""Start one real ``sglang.Engine`` and generate greedily; one JSON line of results.

usage: python3 engine_check.py LABEL --backend triton|flashinfer [--no-cuda-graph] [--deterministic]
           [--dtype auto|float16|float32] [--staggered] [--model DIR] [--draft DIR]
           [--spec NAME --ndt N] [--tp N] [--batches 1,8,32] [--new-tokens 64] [--timing]

``--model``: the target folder (default ``$ENGINE_MODEL``); one holding only a
``config.json`` is served with ``--load-format dummy``. ``--draft``: the
``--speculative-draft-model-path`` folder (DFLASH, DFLASH_BLOCK), likewise with
``--speculative-draft-load-format dummy`` when it holds no weights.

With ``--spec`` the algorithm is served with ``--speculative-num-draft-tokens``
``N`` and overlap scheduling off; the plugin's own settings come from
plugins.toml (``SGLANG_SPEC_PLUGINS_CONFIG``). For every batch size two prompt
sets are generated: repetitive prompts (a random phrase said over and over:
prompt lookup finds its continuation) and random ones. Each result line holds
the output token ids (compared across engines by ``compare.py``), the
speculative counters SGLang reports per request, and with ``--timing`` the
tokens per second of each batch size (a warm-up batch first).

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
    """``count`` prompts of ``kind`` (repetitive|random), the same for every engine."""
    rng = random.Random(f"{kind}-{seed}")
    out = []
    for _ in range(count):
        if kind == "repetitive":
            phrase = [rng.randrange(5, VOCAB) for _ in range(PHRASE_LEN)]
            out.append([1] + phrase * PHRASE_REPEATS)
        else:
            out.append([1] + [rng.randrange(5, VOCAB) for _ in range(RANDOM_PROMPT_LEN)])
    return out


def _has_weights(folder):
    return any(name.endswith(".safetensors") for name in os.listdir(folder))


def engine_kwargs(args):
    model = args.model or os.environ.get("ENGINE_MODEL", "/tmp/tiny-llama")
    kwargs = dict(
        model_path=model,
        skip_tokenizer_init=True, attention_backend=args.backend, tp_size=args.tp,
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
    if args.spec:
        kwargs.update(speculative_algorithm=args.spec, speculative_num_draft_tokens=args.ndt,
                      disable_overlap_schedule=True)
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
    greedy = {"temperature": 0, "max_new_tokens": args.new_tokens, "ignore_eos": True}

    def params(count):
        if not args.staggered:
            return greedy
        return [dict(greedy, max_new_tokens=args.new_tokens - 6 * (i % 8)) for i in range(count)]

    record["stage"] = "generate"
    record["runs"] = []
    for bs in args.batches:
        for kind in ("repetitive", "random"):
            batch = prompts(kind, bs, seed=bs)
            started = time.time()
            outputs = engine.generate(input_ids=batch, sampling_params=params(bs))
            took = time.time() - started
            record["runs"].append({
                "batch": bs, "prompts": kind, "seconds": round(took, 4),
                "output_ids": [o.get("output_ids") for o in outputs],
                "finish": [str(o.get("meta_info", {}).get("finish_reason")) for o in outputs],
                **spec_counters(outputs),
            })
    if args.timing:
        record["stage"] = "timing"
        record["timing"] = []
        for bs in args.batches:
            for kind in ("repetitive", "random"):
                batch = prompts(kind, bs, seed=1000 + bs)
                engine.generate(input_ids=batch, sampling_params=params(bs))  # warm-up at this shape
                started = time.time()
                outputs = engine.generate(input_ids=batch, sampling_params=params(bs))
                took = time.time() - started
                tokens = sum(len(o["output_ids"]) for o in outputs)
                record["timing"].append({"batch": bs, "prompts": kind, "tokens": tokens, "seconds": round(took, 4),
                                         "tokens_per_s": round(tokens / took, 1), **spec_counters(outputs)})
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
    parser.add_argument("--sampled", action="store_true", help="also send a temperature-0.8 request")
    return parser


if __name__ == "__main__":
    args = arguments().parse_args()
    record = {"label": args.label, "backend": args.backend, "cuda_graph": args.cuda_graph,
              "deterministic": args.deterministic, "dtype": args.dtype, "staggered": args.staggered, "spec": args.spec,
              "ndt": args.ndt if args.spec else None, "tp": args.tp, "model": args.model, "draft": args.draft,
              "plugins_config": os.environ.get("SGLANG_SPEC_PLUGINS_CONFIG"), "ok": False}
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
