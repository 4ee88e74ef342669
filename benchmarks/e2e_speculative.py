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
    python3 benchmarks/e2e_speculative.py together --out OUT --labels A,B,... [--rounds N] [--state DIR] [--deadline S]
    python3 benchmarks/e2e_speculative.py tables RESULTS.jsonl [--with OTHER.jsonl ...] [--ndt N]
                                                                         (anywhere: the tables of results/HISTORY.md)

``run`` starts each engine not yet in the results in its own process (one engine = one server: start,
capture, every cell, shut down), until ``--deadline`` seconds from its start leave no time for the next;
``--state DIR`` holds the results (and the recorded continuations) of earlier calls, copied into ``OUT`` first,
so that calls of under 9 minutes each complete the set. See ``benchmarks/METHODS.md`` for the H200 commands.

``together`` keeps a group of engines resident on the GPU at once and times them in turns: each engine
starts after the one before it is up (so each sizes its memory with the others' already taken), then every
round runs each engine's cells once, one engine at a time, the order rotated each round; a record's
``cells`` are the medians over the rounds and ``rounds`` keeps each round. Engines timed in the same round
ran minutes apart on the same GPU, so their ratios are not at the mercy of the 10-15% by which single
timed runs of separate engines (and calls) have differed.

The ``dflash*`` engines are issue 22's speed comparison: SGLang's own DFLASH against the DFLASH_BLOCK example
at the full block (W = B = 16) and below it (W = 4), with a two-layer DFlash-layout draft of dummy weights
(``tools/gpu/engine/make_model.py``), batches 1-64 (``draft_model_table``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
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
DRAFT = Path(os.environ.get("E2E_DRAFT", "/tmp/llama3-8b-shape-dflash-draft"))
DRAFT_BATCHES = (1, 8, 32, 64)
MAX_TOTAL_TOKENS = 36864
"""Every engine's KV pool is capped at this many tokens (128 requests x (64 + 128 + 16) need 26,624): five
engines resident together (``together``) then fit on one H200 (~16 GB of weights, 4.8 GB of KV each)."""
DTYPE = "float16"
"""The target's and the draft's dtype: what SGLang's ``auto`` gave the target's config (no ``torch_dtype``) in
every run of 2026-12-02; the DFlash draft's config says bfloat16, and ``auto`` served the two in different
dtypes (native DFLASH's first step failed: "expected mat1 and mat2 to have the same dtype")."""
NO_PLUGIN = {"SGLANG_PLUGINS": "none-selected"}
"""The environment of an engine SGLang serves alone (plain, NGRAM, native DFLASH): SGLang's ``load_plugins()``
starts no plugin, so this package's loader neither registers nor patches anything in its processes."""
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
    "cycle1_ndt8": {"kind": "cycle", "ndt": 8, "cycle": [4, 8], "steps": 1},
    "cycle16_ndt8": {"kind": "cycle", "ndt": 8, "cycle": [4, 8], "steps": 16},
    "dflash_native_ndt16": {"kind": "dflash", "ndt": 16, "batches": DRAFT_BATCHES},
    "dflash_block_ndt16": {"kind": "dflash_block", "ndt": 16, "batches": DRAFT_BATCHES},
    "dflash_block_w4_ndt16": {"kind": "dflash_block", "ndt": 16, "width": 4, "batches": DRAFT_BATCHES},
    "dflash_native_ovl_ndt16": {"kind": "dflash", "ndt": 16, "batches": DRAFT_BATCHES, "overlap": True},
    "dflash_block_ovl_ndt16": {"kind": "dflash_block", "ndt": 16, "batches": DRAFT_BATCHES, "overlap": True},
    "dflash_block_w4_ovl_ndt16": {"kind": "dflash_block", "ndt": 16, "width": 4, "batches": DRAFT_BATCHES,
                                  "overlap": True},
}
"""In the order they run: plain first (it records the continuations every other engine drafts). A static
width below 16 runs once, at ndt 8: at ndt 16 the same width differs only in the KV it reserves ahead.
``plain_sync`` (plain decoding without the overlap scheduler, as every speculative engine here runs), the
``cycle*`` engines (``switch_table``: widths 4 and 8 in turn, another every step or every 16 steps) and the
``dflash*`` engines (batches 1-64; their tokens are never accepted with dummy weights) come last. A speculative
engine runs synchronously (``--disable-overlap-schedule``) unless its entry says ``"overlap": True`` (the
``*_ovl_*`` engines: SGLang's default, its overlap scheduler). Every engine sets ``--max-running-requests`` to its
largest batch, so SGLang's reset of a speculative engine's cap to 48 (0.5.16, when the flag is left out) applies
to none: native DFLASH and DFLASH_BLOCK serve 64 requests at once alike."""
OVL = "_ovl"
"""The infix of an engine SGLang's overlap scheduler serves: ``controller_ovl_ndt8`` is ``controller_ndt8`` overlapped."""
ENGINES.update({label.replace("_ndt", f"{OVL}_ndt"): dict(spec, overlap=True) for label, spec in list(ENGINES.items())
                if spec["kind"] in ("static", "by_batch", "controller", "ngram") and not spec.get("overlap")})
"""Issue 48's controlled-acceptance engines with overlap: each static width, widths by batch size, the controller
and NGRAM (SGLang's default for it from 0.5.16), judged against plain decoding, which runs overlapped too."""
BUILD_SEP = "@"
"""``LABEL@BUILD`` (in ``--labels``/``--only``) is the engine ``LABEL`` served by another build of this package and
its examples: its processes find them in :func:`build_site` ``(BUILD)`` instead of :data:`SITE`
(``tools/gpu/engine/run.sh setup``, which ``e2e_speculative.sh`` runs, installs ``.e2e/wheels-BUILD``
there), so that two builds are timed side by side in one
group; the tables read only labels without a build."""
SITE = "/tmp/site-proj"
"""Where ``tools/gpu/engine/run.sh setup`` installs this package and its examples on the H200."""


def spec_of(label: str) -> Dict[str, Any]:
    """The :data:`ENGINES` entry of ``label`` (``LABEL@BUILD`` included)."""
    return ENGINES[label.partition(BUILD_SEP)[0]]


def engine_label(label: str) -> str:
    """``label`` if it names an engine (``LABEL@BUILD`` too); argparse's type check."""
    name, _, build = label.partition(BUILD_SEP)
    if name not in ENGINES or (BUILD_SEP in label and not re.fullmatch(r"[\w.-]+", build)):
        raise argparse.ArgumentTypeError(f"{label!r}: not an engine ({', '.join(ENGINES)}; LABEL@BUILD for another build)")
    return label


def build_site(build: str) -> str:
    return f"{SITE}-{build}"


def process_env(label: str, environ: Dict[str, str]) -> Dict[str, str]:
    """The environment of the engine process ``label``: ``environ``, and for ``LABEL@BUILD`` a ``PYTHONPATH``
    whose :data:`SITE` is the build's site instead (SGLang's scheduler processes inherit it)."""
    env = dict(environ, PYTHONUNBUFFERED="1")
    build = label.partition(BUILD_SEP)[2]
    if build:
        parts = env.get("PYTHONPATH", "").split(os.pathsep)
        if SITE not in parts:
            raise SystemExit(f"{label}: PYTHONPATH has no {SITE} to replace with {build_site(build)}")
        env["PYTHONPATH"] = os.pathsep.join(build_site(build) if part == SITE else part for part in parts)
    return env
ACCEPTANCE_KINDS = ("static", "by_batch", "controller", "cycle")
"""The CONTROLLED_ACCEPTANCE engines: a cell per acceptance."""
PLUGIN_KINDS = ACCEPTANCE_KINDS + ("dflash_block",)
DRAFT_MODEL_KINDS = ("dflash", "dflash_block")
"""Issue 22's engines: ``draft_model_table`` reads them, ``tables`` and ``run``'s default order leave them out."""


def draft_model(label: str) -> bool:
    return ENGINES.get(label, {}).get("kind") in DRAFT_MODEL_KINDS


def prompts(batch: int) -> List[List[int]]:
    rng = random.Random(f"e2e-{batch}")
    return [[LLAMA3_8B["bos_token_id"]] + [rng.randrange(1000, 100000) for _ in range(PROMPT_LEN - 1)] for _ in range(batch)]


def table_text(table: Dict[int, Any]) -> str:
    return "{" + ", ".join(f"{k} = {v}" for k, v in table.items()) + "}"


def plugins_toml(spec: Dict[str, Any], continuations: Path) -> str:
    """plugins.toml of a CONTROLLED_ACCEPTANCE engine, or of a DFLASH_BLOCK one."""
    if spec["kind"] == "dflash_block":
        lines = ['[plugins]', 'enable = ["dflash_block"]']
        if "width" in spec:
            lines += ['[algorithms.DFLASH_BLOCK]', f"verify_width = {spec['width']}"]
        return "\n".join(lines) + "\n"
    lines = ['[plugins]', 'enable = ["controlled_acceptance"]', '[algorithms.CONTROLLED_ACCEPTANCE]',
             f'continuations = "{continuations}"', f"max_tokens_per_req = {spec['ndt']}"]
    if spec["kind"] == "static":
        lines.append(f"verify_width = {spec['width']}")
    elif spec["kind"] == "cycle":
        lines += [f"widths_by_batch_size = {{1 = {spec['cycle']}}}", f"width_cycle = {spec['cycle']}",
                  f"width_cycle_steps = {spec['steps']}"]
    elif spec["kind"] == "by_batch":
        lines.append(f"widths_by_batch_size = {table_text(BY_BATCH[spec['ndt']])}")
    else:
        lines += [f"widths_by_batch_size = {table_text(CANDIDATES[spec['ndt']])}", "widths_by_acceptance = {log_every = 8}"]
    return "\n".join(lines) + "\n"


def widths_table(spec: Dict[str, Any]):
    """The engine's widths by batch size (for the graphs' cost), None for one width."""
    from sglang_spec_plugins.widths_by_batch_size import WidthsByBatchSize

    if spec["kind"] == "cycle":
        return WidthsByBatchSize.parse({1: spec["cycle"]})
    table = {"by_batch": BY_BATCH, "controller": CANDIDATES}.get(spec["kind"])
    return None if table is None else WidthsByBatchSize.parse(table[spec["ndt"]])


def graphs_estimate(spec: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """check's estimate of the engine's decode graphs (widths_by_batch_size.graph_cost); None for one width."""
    from sglang_spec_plugins.widths_by_batch_size import graph_cost

    table = widths_table(spec)
    return None if table is None else graph_cost(table, BATCHES, VOCAB)


def write_model() -> None:
    """The target's config.json and the DFLASH engines' two-layer draft (config only: both dummy weights)."""
    if not (MODEL / "config.json").exists():
        from transformers import LlamaConfig

        LlamaConfig(**LLAMA3_8B, architectures=["LlamaForCausalLM"]).save_pretrained(MODEL)  # SGLang picks the model class by it
    if not (DRAFT / "config.json").exists():
        make_model = Path(__file__).resolve().parent.parent / "tools" / "gpu" / "engine" / "make_model.py"
        subprocess.run([sys.executable, str(make_model), str(DRAFT), "--draft-for", str(MODEL), "--block", "16",
                        "--layers", "2"], check=True)


def engine_kwargs(spec: Dict[str, Any]) -> Dict[str, Any]:
    """SGLang's ``Engine`` arguments of an engine. ``sleep_on_idle``: an idle scheduler otherwise polls its
    sockets without pause, one core at 100% per engine, so in ``together`` the resident engines not being timed
    compete for the host with the one that is (the synchronous engines' step is host time)."""
    batches = list(spec.get("batches", BATCHES))
    kwargs = dict(model_path=str(MODEL), load_format="dummy", dtype=DTYPE, skip_tokenizer_init=True,
                  attention_backend="flashinfer", mem_fraction_static=0.75, max_total_tokens=MAX_TOTAL_TOKENS, max_running_requests=max(batches),
                  disable_radix_cache=True, cuda_graph_bs_decode=batches, disable_prefill_cuda_graph=True, random_seed=0,
                  sleep_on_idle=True, log_level="info")
    if spec.get("sync") or (spec["kind"] != "plain" and not spec.get("overlap")):
        kwargs["disable_overlap_schedule"] = True
    if spec["kind"] == "ngram":
        kwargs.update(speculative_algorithm="NGRAM", speculative_num_draft_tokens=spec["ndt"], speculative_eagle_topk=1,
                      speculative_num_steps=spec["ndt"] - 1)
    elif spec["kind"] in ("dflash", "dflash_block"):
        kwargs.update(speculative_algorithm="DFLASH" if spec["kind"] == "dflash" else "DFLASH_BLOCK",
                      speculative_num_draft_tokens=spec["ndt"], speculative_draft_model_path=str(DRAFT),
                      speculative_draft_load_format="dummy")
    elif spec["kind"] != "plain":
        kwargs.update(speculative_algorithm="CONTROLLED_ACCEPTANCE", speculative_num_draft_tokens=spec["ndt"])
    return kwargs


def overlap_schedule(record: Dict[str, Any]) -> bool:
    """Whether SGLang's overlap scheduler served a record's engine: its ``overlap_schedule`` (recorded since
    2026-12-06), else as every earlier run did: on for plain decoding without ``sync``, off for every
    speculative engine (``--disable-overlap-schedule``)."""
    if "overlap_schedule" in record:
        return record["overlap_schedule"]
    return spec_of(record["label"])["kind"] == "plain" and not spec_of(record["label"]).get("sync")


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


def prepare_engine(label: str, out: Path) -> Dict[str, Any]:
    """Set this process's environment up for the engine ``label`` (its plugins.toml, or no plugin); its record."""
    spec = spec_of(label)
    record: Dict[str, Any] = {"label": label, **spec, "ok": False}
    if spec["kind"] in PLUGIN_KINDS:
        config = out / "configs" / f"{label}.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(plugins_toml(spec, out / CONTINUATIONS))
        os.environ["SGLANG_SPEC_PLUGINS_CONFIG"] = str(config)
        record["plugins_toml"] = config.read_text()
        if spec["kind"] != "dflash_block":
            record["graphs_estimate"] = graphs_estimate(spec)
    else:
        os.environ.update(NO_PLUGIN)
    os.environ.update(spec.get("env", {}))
    return record


def launch_engine(record: Dict[str, Any], out: Path):
    """Start the engine of a prepared ``record`` (the plain engine also records the continuations)."""
    import sglang
    import torch

    record.update(sglang=sglang.__version__, torch=torch.__version__, device=torch.cuda.get_device_name(0))
    kwargs = engine_kwargs(spec_of(record["label"]))
    record["overlap_schedule"] = not kwargs.get("disable_overlap_schedule", False)
    started = time.perf_counter()
    engine = sglang.Engine(**kwargs)
    record["engine_start_s"] = round(time.perf_counter() - started, 1)
    if record["label"] == "plain":  # the continuations every CONTROLLED_ACCEPTANCE engine drafts
        runs = []
        for batch in BATCHES:
            outputs, _ = generate(engine, batch, RECORDED, None)
            runs += [(p, o["output_ids"]) for p, o in zip(prompts(batch), outputs)]
        from controlled_acceptance_drafter.record import record as make_record

        (out / CONTINUATIONS).write_text(json.dumps(make_record(runs)))
    return engine


def engine_cells(engine, label: str) -> List[Dict[str, Any]]:
    """Every cell of the engine ``label``: each batch size at each acceptance (once for an engine that drafts
    without the continuations)."""
    spec = spec_of(label)
    acceptances = ACCEPTANCES if spec["kind"] in ACCEPTANCE_KINDS else (None,)
    return [cell(engine, batch, acceptance, spec["kind"] == "controller") for acceptance in acceptances
            for batch in spec.get("batches", BATCHES)]


def engine_main(label: str, out: Path) -> Dict[str, Any]:
    """One engine: start it, run every cell, shut it down; its result record."""
    record = prepare_engine(label, out)
    engine = launch_engine(record, out)
    record["cells"] = engine_cells(engine, label)
    engine.shutdown()
    record["ok"] = True
    return record


TRACE_SECONDS = 60
"""How long ``profile_engine`` waits for the trace SGLang's scheduler writes after its last profiled step."""
PROFILE_SECONDS = TRACE_SECONDS + 15
"""What one engine's profile may take: its batch and the trace. On 2026-12-02 engines asked with less
than this left answered nothing or no trace."""
PROFILED_STEPS = 24
"""Forward steps SGLang's profiler records in ``profile_engine`` (the prefill and 23 decode steps)."""
PROFILE_BATCH = int(os.environ.get("E2E_PROFILE_BATCH", "1"))
"""Requests of ``profile_engine``'s batch (one of :data:`BATCHES`, so the decode graphs of its size are captured)."""
WAITS = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync", "cudaMemcpy")
"""CUDA runtime calls in which the host can wait for the GPU (a device-to-host copy waits for its stream)."""


def profile_engine(engine, label: str, out: Path) -> Dict[str, Any]:
    """One batch of :data:`PROFILE_BATCH` requests under SGLang's own profiler (``Engine.start_profile``, CPU
    and GPU, stopping itself after :data:`PROFILED_STEPS` forward steps); :func:`trace_summary` of the trace it
    wrote, which is kept as ``OUT/profiles/LABEL.trace.json.gz`` (the script packs the folder into one archive)."""
    directory = Path(tempfile.gettempdir()) / "e2e-profiles" / label
    directory.mkdir(parents=True, exist_ok=True)
    engine.start_profile(output_dir=str(directory), num_steps=PROFILED_STEPS, activities=["CPU", "GPU"])
    # at acceptance 0.5 a step commits under 2 tokens a request, so NEW_TOKENS outlast PROFILED_STEPS steps at
    # any width (on 2026-12-03, 40 tokens at 0.9 ended before the 24th step of widths 2 and 4: no trace written)
    acceptance = ACCEPTANCES[0] if spec_of(label)["kind"] in ACCEPTANCE_KINDS else None
    generate(engine, PROFILE_BATCH, NEW_TOKENS, acceptance)
    trace = _trace_steps().wait_for_trace(directory, TRACE_SECONDS)
    if trace is None:
        return {"error": f"no trace in {directory}"}
    (out / "profiles").mkdir(exist_ok=True)
    shutil.copyfile(trace, out / "profiles" / f"{label}.trace.json.gz")
    return {"batch": PROFILE_BATCH, **trace_summary(trace)}


def _trace_steps():
    """``tools/gpu/engine/trace_steps.py``, which reads SGLang's profiler traces (the scripts there import it)."""
    engine_tools = str(Path(__file__).resolve().parent.parent / "tools" / "gpu" / "engine")
    if engine_tools not in sys.path:
        sys.path.insert(0, engine_tools)
    import trace_steps

    return trace_steps


def trace_summary(path: Path) -> Dict[str, Any]:
    """What a Chrome trace of torch's profiler says about the host and the GPU over its whole window: wall
    and GPU-busy milliseconds (the union of kernels and copies), kernels, graph launches, each CUDA runtime
    call in which the host can wait (:data:`WAITS`: count and milliseconds), and the 15 CPU ops that took
    longest in total."""
    trace_steps = _trace_steps()
    events = trace_steps.read(path)
    if not events:
        return {"trace": path.name, "events": 0}
    busy = trace_steps.gpu_busy_us(events)
    runtime: Dict[str, List[float]] = {}
    cpu_ops: Dict[str, List[float]] = {}
    for e in events:
        if e.get("cat") == "cuda_runtime":
            runtime.setdefault(e["name"], [0, 0.0])
            runtime[e["name"]][0] += 1
            runtime[e["name"]][1] += e["dur"] / 1000
        elif e.get("cat") == "cpu_op":
            cpu_ops.setdefault(e["name"], [0, 0.0])
            cpu_ops[e["name"]][0] += 1
            cpu_ops[e["name"]][1] += e["dur"] / 1000
    start, end = min(e["ts"] for e in events), max(e["ts"] + e["dur"] for e in events)
    top = sorted(cpu_ops.items(), key=lambda item: -item[1][1])[:15]
    return {"trace": path.name, "wall_ms": round((end - start) / 1000, 3), "gpu_busy_ms": round(busy / 1000, 3),
            "kernels": sum(1 for e in events if e.get("cat") == "kernel"),
            "graph_launches": runtime.get("cudaGraphLaunch", [0])[0],
            "waits": {name: [count, round(ms, 3)] for name, (count, ms) in sorted(runtime.items()) if name in WAITS},
            "cpu_ops_ms": {name: [count, round(ms, 3)] for name, (count, ms) in top}}


def resident_main(label: str, out: Path, address: str) -> Dict[str, Any]:
    """One engine of a ``together`` group, driven over a connection to the coordinator at ``address``: it
    says ``imported`` once SGLang is imported (while the engines before it start), starts on ``start``,
    answers each ``cells`` with one run of its cells and ``profile`` with :func:`profile_engine`'s summary,
    and shuts down on ``stop``; its result record (without cells: the coordinator keeps them)."""
    from multiprocessing.connection import Client

    record = prepare_engine(label, out)
    import sglang  # noqa: F401 - the import's seconds overlap the other engines' starts
    import torch  # noqa: F401

    conn = Client(address, family="AF_UNIX")
    conn.send(("imported", label))
    if conn.recv() != "start":
        return {"label": label, "ok": False, "error": "stopped before its start"}
    engine = launch_engine(record, out)
    conn.send(("ready", record))
    while True:
        message = conn.recv()
        if message == "cells":
            conn.send(("cells", engine_cells(engine, label)))
        elif message == "profile":
            conn.send(("profile", profile_engine(engine, label, out)))
        else:
            break
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


def read_results(path: Path) -> List[Dict[str, Any]]:
    """The records of a results file (one JSON object a line)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def done_labels(results: Path) -> set:
    return {r["label"] for r in read_results(results) if r.get("ok")} if results.exists() else set()


def engine_process(command: List[str], out: Path, log: Path) -> subprocess.Popen:
    """``e2e_speculative.py COMMAND LABEL ... --out OUT`` in its own process group (SGLang's scheduler processes
    with it), from /tmp (no ./plugins.toml there: the engine's environment says what the loader loads), in
    :func:`process_env`."""
    with open(log, "w") as sink:
        return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *command, "--out", str(out)], stdout=sink,
                                stderr=subprocess.STDOUT, env=process_env(command[1], os.environ), cwd="/tmp",
                                start_new_session=True)


def run_engine(label: str, out: Path, log: Path, timeout: float) -> Any:
    """The engine ``label`` alone, killed at ``timeout``; its return code."""
    proc = engine_process(["engine", label], out, log)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        return "killed at the deadline"


def result_line(log: Path) -> Optional[Dict[str, Any]]:
    """The record an engine process printed last (``RESULT {...}``), None if it printed none."""
    line = next((ln for ln in reversed(log.read_text(errors="replace").splitlines()) if ln.startswith("RESULT ")), None)
    return json.loads(line[len("RESULT "):]) if line else None


def seed_state(out: Path, state: Optional[str]) -> None:
    """Copy an earlier call's results and continuations from ``state`` into ``out`` (where ``out`` has none)."""
    if state:
        for name in (RESULTS, CONTINUATIONS):
            if (Path(state) / name).exists() and not (out / name).exists():
                shutil.copy(Path(state) / name, out / name)


def finish_record(record: Dict[str, Any], log: Path, started: float) -> Dict[str, Any]:
    record.update(read_log(log), process_s=round(time.time() - started, 1),
                  date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), command=" ".join(sys.argv))
    return record


def run_main(args) -> int:
    began = time.time()
    out = Path(args.out).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    seed_state(out, args.state)
    write_model()
    wanted = args.only.split(",") if args.only else [label for label in ENGINES
                                                     if label != "plain_sync" and not draft_model(label)]
    for label in wanted:
        if label in done_labels(out / RESULTS):
            continue
        if spec_of(label)["kind"] not in ("plain", "ngram") and not (out / CONTINUATIONS).exists():
            print(f"SKIP {label}: no recorded continuations (run plain first)", flush=True)
            continue
        left = args.deadline - (time.time() - began)
        if left < args.engine_seconds:
            print(f"STOP before {label}: {left:.0f} s left, an engine takes up to {args.engine_seconds} s", flush=True)
            break
        log = out / "logs" / f"{label}.log"
        started = time.time()
        rc = run_engine(label, out, log, timeout=left)
        record = finish_record(result_line(log) or {"label": label, "ok": False, "rc": rc}, log, started)
        with open(out / RESULTS, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{label}: ok={record['ok']} {record['process_s']} s", flush=True)
    missing = [label for label in wanted if label not in done_labels(out / RESULTS)]
    print(f"done: {len(wanted) - len(missing)} of {len(wanted)}; missing: {', '.join(missing) or 'none'}", flush=True)
    return 0


def lower_median(values: List[Any], key=None) -> Any:
    """The median of ``values`` (the lower middle one for an even count), by ``key``."""
    return sorted(values, key=key)[(len(values) - 1) // 2]


def median_cells(rounds: List[List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """Cell by cell over the rounds, the cell of the median tokens/s."""
    return [lower_median(list(cells), key=lambda c: c["tokens_per_s"]) for cells in zip(*rounds)]


class Group:
    """Engines resident together, each its own process (``resident_main``) on a connection to this one."""

    def __init__(self, labels: List[str], out: Path, deadline: float):
        from multiprocessing.connection import Listener

        self.out, self.deadline, self.began = out, deadline, {}
        self.address = os.path.join(tempfile.mkdtemp(prefix="e2e-"), "group.sock")
        self.listener = Listener(self.address, family="AF_UNIX")
        self.procs = {label: engine_process(["resident", label, "--address", self.address], out, self.log(label))
                      for label in labels}
        self.conns: Dict[str, Any] = {}
        self.records: Dict[str, Dict[str, Any]] = {}
        threading.Thread(target=self._accept, args=(len(labels),), daemon=True).start()

    def log(self, label: str) -> Path:
        return self.out / "logs" / f"{label}.log"

    def _accept(self, count: int) -> None:
        for _ in range(count):
            conn = self.listener.accept()
            _, label = conn.recv()  # ("imported", label)
            self.conns[label] = conn

    def ask(self, label: str, message: str, expect: str, timeout: float) -> Any:
        """Send ``message`` to ``label`` and wait for its ``expect`` answer; an engine that dies, or does not
        answer in ``timeout`` seconds, is killed and its record says why (None)."""
        ends = time.time() + timeout
        while label not in self.conns and self.procs[label].poll() is None and time.time() < ends:
            time.sleep(0.5)
        conn = self.conns.get(label)
        try:
            if conn is not None:
                conn.send(message)
                while time.time() < ends and self.procs[label].poll() is None:
                    if conn.poll(1.0):
                        kind, value = conn.recv()
                        if kind == expect:
                            return value
        except (EOFError, OSError):  # the engine's end of the connection closed: its process is ending
            self.procs[label].wait(timeout=30)
        if self.procs[label].poll() is None:
            self.fail(label, f"no answer to {message!r} in {timeout:.0f} s")
        else:
            said = (result_line(self.log(label)) or {}).get("error", "")
            self.fail(label, f"the process ended (rc {self.procs[label].returncode}) before answering {message!r}: {said}")
        return None

    def fail(self, label: str, why: str) -> None:
        if self.procs[label].poll() is None:
            os.killpg(self.procs[label].pid, 9)
            self.procs[label].wait()
        self.conns.pop(label, None)
        record = self.records.setdefault(label, {"label": label, **spec_of(label)})
        record.update(ok=False, error=why)

    def left(self) -> float:
        return self.deadline - time.time()

    def start(self, labels: List[str]) -> List[str]:
        """Start the engines one after another; the labels that are up."""
        up = []
        for label in labels:
            self.began[label] = time.time()
            record = self.ask(label, "start", "ready", self.left())
            if record is not None:
                self.records[label] = record
                up.append(label)
            print(f"{label}: {'up' if record else 'failed'} after {time.time() - self.began[label]:.0f} s", flush=True)
        return up

    def rounds(self, labels: List[str], count: int, cell_seconds: float) -> Dict[str, List[List[Dict[str, Any]]]]:
        """Up to ``count`` rounds, each engine's cells once a round in a rotated order; no round starts that
        the last one's length says would end past the deadline."""
        done: Dict[str, List[List[Dict[str, Any]]]] = {label: [] for label in labels}
        last = 0.0
        for r in range(count):
            live = [label for label in labels if label in self.conns]
            if not live or (r and self.left() < 1.1 * last):
                break
            started = time.time()
            for label in live[r % len(live):] + live[:r % len(live)]:
                cells = self.ask(label, "cells", "cells", min(cell_seconds, self.left()))
                if cells is not None:
                    done[label].append(cells)
            last = time.time() - started
            print(f"round {r + 1}: {last:.0f} s", flush=True)
        return done

    def profile(self, labels: List[str], seconds: float = PROFILE_SECONDS) -> Dict[str, Dict[str, Any]]:
        """Each engine's :func:`profile_engine` summary, one engine at a time, each given ``seconds``; an engine
        is not asked once fewer than ``seconds`` are left before the deadline (left out, its record unmarked)."""
        summaries = {}
        for label in labels:
            if label not in self.conns:
                continue
            if self.left() < seconds:
                print(f"{label}: not profiled, {self.left():.0f} s left", flush=True)
                continue
            summary = self.ask(label, "profile", "profile", seconds)
            if summary is not None:
                summaries[label] = summary
        return summaries

    def stop(self) -> None:
        for conn in self.conns.values():
            try:
                conn.send("stop")
            except OSError:  # an engine that ended on its own
                pass
        for label, proc in self.procs.items():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
        self.listener.close()


def together_main(args) -> int:
    out = Path(args.out).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    seed_state(out, args.state)
    write_model()
    labels = [engine_label(label) for label in args.labels.split(",")]
    group = Group(labels, out, time.time() + args.deadline)
    up = group.start(labels)
    rounds = group.rounds(up, args.rounds, args.cell_seconds)
    only = args.profile_only.split(",") if args.profile_only else up
    profiled = [label for label in up if label in only]
    profiles = group.profile(profiled) if args.profile else {}
    group.stop()
    with open(out / RESULTS, "a") as f:
        for label in labels:
            record = group.records.get(label, {"label": label, **spec_of(label), "ok": False, "error": "not started"})
            if rounds.get(label):
                record.update(ok=True, cells=median_cells(rounds[label]), rounds=rounds[label])
            elif record.get("ok") is not False:
                record.update(ok=False, error="no round ran")
            record["group"] = labels
            if label in profiles:
                record["profile"] = profiles[label]
            finish_record(record, group.log(label), group.began.get(label, time.time()))
            f.write(json.dumps(record) + "\n")
            print(f"{label}: ok={record['ok']} rounds={len(rounds.get(label, []))}", flush=True)
    return 0


# -- the tables -------------------------------------------------------------------

BAR = {"vs_best_static": 0.97, "vs_ndt_where_not_best": 1.15, "vs_plain": 0.98}
"""Issue 23's bar: the controller within 3% of the best static width, at least 1.15x static ndt where ndt is
not the best width, and never below 0.98x plain decoding."""


def bar_verdict(vs_best: float, vs_ndt: Optional[tuple], vs_plain: tuple) -> str:
    """A cell's verdict on :data:`BAR`: ``met``, or ``missed:`` and the parts missed (``best``, ``ndt``,
    ``plain``), each with ``*`` where no static width reaches that part either. ``vs_ndt`` and ``vs_plain`` are
    (the controller's ratio, the best static's ratio); ``vs_ndt`` None where static ndt is the best width."""
    missed = [] if vs_best >= BAR["vs_best_static"] else ["best"]
    for part, ratios, key in (("ndt", vs_ndt, "vs_ndt_where_not_best"), ("plain", vs_plain, "vs_plain")):
        if ratios is not None and ratios[0] < BAR[key]:
            missed.append(part + ("*" if ratios[1] < BAR[key] else ""))
    return "met" if not missed else "missed: " + ", ".join(missed)


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


def static_label(width: int, ovl: str = "") -> str:
    """The static engine of ``width`` (``ovl``: :data:`OVL` for its overlapped twin)."""
    return f"static{width}{ovl}_ndt{8 if width < 16 else 16}"


def with_others(results: List[Dict[str, Any]], others: List[List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """``results`` and, of each engine they lack, its finished record in the first of ``others`` holding one
    (a table of one call beside engines another call ran)."""
    have = {r["label"] for r in results if r.get("ok")}
    added = []
    for other in others:
        for rec in other:
            if rec.get("ok") and rec["label"] not in have:
                have.add(rec["label"])
                added.append(rec)
    return results + added


def bar_cells(results: List[Dict[str, Any]], ndt: int, ovl: str = "") -> List[Dict[str, Any]]:
    """Issue 23's bar per (acceptance, batch) at ``ndt`` (empty for a run without this ndt's controller and
    static ndt), of the synchronous engines, or with ``ovl`` (:data:`OVL`) of the overlapped ones:
    ``tokens_per_s`` of each engine (``None`` where it did not run), ``best_width`` (the static width
    with the most tokens/s), ``vs_best``, ``vs_ndt`` and ``vs_plain`` (the controller's ratios; ``None`` where an
    engine is missing), ``ndt_is_best``, ``verdict`` (:func:`bar_verdict`, ``-`` where an engine is missing) and
    ``committed`` (committed tokens per verify step of each engine)."""
    results = [rec for rec in results if not draft_model(rec["label"])]  # draft_model_table's
    r, committed = cells(results), cells(results, "committed_per_verify")
    controller = f"controller{ovl}_ndt{ndt}"
    if controller not in r and static_label(ndt, ovl) not in r:
        return []
    statics = [w for w in (2, 4, 8, 16) if w <= ndt]
    labels = ["plain"] + [static_label(w, ovl) for w in statics] + [f"by_batch{ovl}_ndt{ndt}", controller, f"ngram{ovl}_ndt{ndt}"]
    out = []
    for a in ACCEPTANCES:
        for b in BATCHES:
            values = {label: r.get(label, {}).get((b, a)) for label in labels}
            ctl, plain = values[controller], values["plain"]
            static = {w: values[static_label(w, ovl)] for w in statics}
            ran = {w: v for w, v in static.items() if v is not None}
            best_width = max(ran, key=ran.get) if ran else None
            row = {"batch": b, "acceptance": a, "tokens_per_s": values, "best_width": best_width, "vs_best": None,
                   "vs_ndt": None, "vs_plain": None, "ndt_is_best": None, "verdict": "-",
                   "committed": {label: committed.get(label, {}).get((b, a)) for label in labels}}
            if None not in (ctl, plain, best_width, static[ndt]):
                best = static[best_width]
                row.update(vs_best=ctl / best, vs_ndt=ctl / static[ndt], vs_plain=ctl / plain, ndt_is_best=static[ndt] >= best)
                row["verdict"] = bar_verdict(row["vs_best"], None if row["ndt_is_best"] else (row["vs_ndt"], best / static[ndt]),
                                             (row["vs_plain"], best / plain))
            out.append(row)
    return out


def tables(results: List[Dict[str, Any]], ndts=NDTS) -> str:
    """Per ndt of ``ndts`` whose controller or static ndt ran, synchronous and then overlapped (:data:`OVL`), one
    markdown table of tokens/s and the bar's ratios per (batch, acceptance) (:func:`bar_cells`; overlapped, also
    the lowest of the plugin engines ÷ plain and the controller ÷ NGRAM, issue 48's bar), and the engines' graph
    capture time and memory."""
    results = [rec for rec in results if not draft_model(rec["label"])]  # draft_model_table's
    parts = []
    for ndt, ovl in [(ndt, ovl) for ndt in ndts for ovl in ("", OVL)]:
        rows_of_bar = bar_cells(results, ndt, ovl)
        if not rows_of_bar:
            continue  # a run without this ndt's own engines
        statics = [w for w in (2, 4, 8, 16) if w <= ndt]
        head = ["batch", "acceptance", "plain"] + [f"static {w}" for w in statics] + ["by batch", "controller", "NGRAM",
                                                                                         "ctl ÷ best static", f"ctl ÷ static {ndt}",
                                                                                         "ctl ÷ plain", "bar",
                                                                                         "committed/verify: static 4, ctl"]
        head += ["lowest plugin ÷ plain", "ctl ÷ NGRAM"] if ovl else []
        title = f"**ndt {ndt}**" + (", SGLang's overlap scheduler on" if ovl else "")
        rows = [f"{title}, tokens/s (CUDA graphs, flashinfer)", "", "| " + " | ".join(head) + " |",
                "|" + "---|" * len(head)]
        for row in rows_of_bar:
            ratios = ["-"] * 3
            if row["vs_best"] is not None:
                ratios = [f"{row['vs_best']:.2f}", f"{row['vs_ndt']:.2f}" + ("" if not row["ndt_is_best"] else " (best)"),
                          f"{row['vs_plain']:.2f}"]
            per_verify = [row["committed"].get(static_label(4, ovl)), row["committed"][f"controller{ovl}_ndt{ndt}"]]
            rows.append("| " + " | ".join([str(row["batch"]), f"{row['acceptance']}"]
                                           + ["-" if v is None else f"{v:.0f}" for v in row["tokens_per_s"].values()]
                                           + ratios + [row["verdict"], ", ".join("-" if v is None else f"{v:.2f}" for v in per_verify)]
                                           + (_against_plain_and_ngram(row, ndt) if ovl else []))
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


def _against_plain_and_ngram(row: Dict[str, Any], ndt: int) -> List[str]:
    """An overlapped row's issue-48 ratios: the slowest plugin engine ÷ plain (bar 0.98: :data:`BAR`), and the
    controller ÷ NGRAM (bar 1.0); ``-`` where an engine is missing."""
    speeds = row["tokens_per_s"]
    plain, ctl, ngram = speeds["plain"], speeds[f"controller{OVL}_ndt{ndt}"], speeds[f"ngram{OVL}_ndt{ndt}"]
    plugins = [v for label, v in speeds.items() if v is not None and label != "plain" and not label.startswith("ngram")]
    lowest = f"{min(plugins) / plain:.2f}" if plugins and plain else "-"
    return [lowest, "-" if None in (ctl, ngram) else f"{ctl / ngram:.2f}"]


SWITCH_BAR = 1.01
"""Issue 23's bar for a switch: under 1% added to a step's time."""


def switch_table(results: List[Dict[str, Any]]) -> str:
    """What a switch of width costs: per (batch, acceptance), tokens/s of the engine taking widths 4 and 8 in
    turn with another width every step (``cycle1_ndt8``) and every 16 steps (``cycle16_ndt8``), the same mix
    of widths with 16 times fewer switches; their committed tokens per verify step, and the ratio of their
    seconds per verify step (each cell's seconds over its verify steps, the prefill's share in both): of the
    median rounds (the bar's) and of each engine's fastest round of the cell (what host noise, which only
    slows a step, leaves least of)."""
    by_label = {r["label"]: r for r in results if r.get("ok")}
    every, runs = "cycle1_ndt8", "cycle16_ndt8"
    head = ["batch", "acceptance", "every step", "every 16 steps", "committed/verify: every, 16",
            "seconds/verify ÷", "fastest rounds ÷", "bar"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    if every not in by_label or runs not in by_label:
        return "\n".join(rows)
    median = [_by_cell(by_label[x]) for x in (every, runs)]
    fastest = [fastest_cells(by_label[x]) for x in (every, runs)]
    for a in ACCEPTANCES:
        for b in BATCHES:
            key = (b, a)
            if key not in median[0] or key not in median[1]:
                continue
            mine, theirs = median[0][key], median[1][key]
            ratio = _per_verify(mine) / _per_verify(theirs)
            fast = _per_verify(fastest[0][key]) / _per_verify(fastest[1][key])
            rows.append("| " + " | ".join([str(b), f"{a}", f"{mine['tokens_per_s']:.0f}", f"{theirs['tokens_per_s']:.0f}",
                                           f"{mine['committed_per_verify']:.2f}, {theirs['committed_per_verify']:.2f}",
                                           f"{ratio:.3f}", f"{fast:.3f}", "met" if ratio <= SWITCH_BAR else "missed"]) + " |")
    return "\n".join(rows)


def builds_table(results: List[Dict[str, Any]]) -> str:
    """Two builds of this package side by side (``LABEL@BUILD`` beside ``LABEL``, resident in one group): per
    engine and (batch, acceptance), tokens/s of each (the median rounds) and their ratio, the committed tokens
    per verify step of each (the same drafts: equal where the builds do the same work), and per engine the
    median ratio over the cells in each round and over the median rounds."""
    by_label = {r["label"]: r for r in results if r.get("ok")}
    pairs = [(label, label.partition(BUILD_SEP)) for label in by_label if BUILD_SEP in label]
    pairs = [(other, this, build) for other, (this, _, build) in pairs if this in by_label]
    head = ["engine", "batch", "acceptance", "this tree", "build", "this ÷ build", "committed/verify: this, build"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    summary = ["| engine | build | this ÷ build, median over cells: each round | of the median rounds |", "|---|---|---|---|"]
    for other, this, build in pairs:
        mine, theirs = _by_cell(by_label[this]), _by_cell(by_label[other])
        ratios = []
        for key in sorted(mine, key=lambda k: (k[1] or 0, k[0])):
            if key not in theirs:
                continue
            a, b = mine[key], theirs[key]
            ratios.append(a["tokens_per_s"] / b["tokens_per_s"])
            rows.append("| " + " | ".join([this, str(key[0]), str(key[1]), f"{a['tokens_per_s']:.0f}", f"{b['tokens_per_s']:.0f}",
                                           f"{ratios[-1]:.3f}", f"{a.get('committed_per_verify', '-')}, "
                                                                f"{b.get('committed_per_verify', '-')}"]) + " |")
        per_round = [statistics.median(x["tokens_per_s"] / y["tokens_per_s"] for x, y in zip(ra, rb))
                     for ra, rb in zip(by_label[this].get("rounds", []), by_label[other].get("rounds", []))]
        summary.append(f"| {this} | {build} | {', '.join(f'{r:.3f}' for r in per_round)} | "
                       f"{_ratio_range(ratios)} |")
    return "\n".join(rows) + "\n\n" + "\n".join(summary)


def against_table(results: List[Dict[str, Any]], reference: List[Dict[str, Any]]) -> str:
    """The same engines in two calls (hosts): per engine of ``results`` that ``reference`` also ran, the median,
    lowest and highest ratio of its cells' tokens/s to the reference's, its committed tokens per verify step
    equal in every cell or not (the same work), its start seconds in both, and the median spread of its rounds
    ((fastest - slowest) / median round of a cell)."""
    ref = {r["label"]: r for r in reference if r.get("ok")}
    head = ["engine", "÷ reference: median (lowest-highest)", "same committed/verify", "start s: this, reference",
            "round spread: median (highest)"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rec in results:
        if not rec.get("ok") or rec["label"] not in ref:
            continue
        mine, theirs = _by_cell(rec), _by_cell(ref[rec["label"]])
        keys = [k for k in mine if k in theirs]
        ratios = [mine[k]["tokens_per_s"] / theirs[k]["tokens_per_s"] for k in keys]
        same = all(mine[k].get("committed_per_verify") == theirs[k].get("committed_per_verify") for k in keys)
        spreads = [(max(v) - min(v)) / lower_median(v) for v in
                   ([c["tokens_per_s"] for c in cells_of_key] for cells_of_key in zip(*rec.get("rounds", [rec["cells"]])))]
        rows.append("| " + " | ".join([rec["label"], _ratio_range(ratios),
                                       "yes" if same else "no",
                                       f"{rec.get('engine_start_s', '-')}, {ref[rec['label']].get('engine_start_s', '-')}",
                                       f"{statistics.median(spreads):.3f} ({max(spreads):.3f})"]) + " |")
    return "\n".join(rows)


def _by_cell(record: Dict[str, Any]) -> Dict[tuple, Dict[str, Any]]:
    """``{(batch, acceptance): cell}`` of a record's (median) cells."""
    return {(c["batch"], c["acceptance"]): c for c in record["cells"]}


def _ratio_range(ratios: List[float]) -> str:
    """``median (lowest-highest)`` of ``ratios``."""
    return f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"


def _per_verify(cell: Dict[str, Any]) -> float:
    """A cell's seconds per verify step: its seconds over ``(tokens - batch) / committed per verify`` steps."""
    return cell["seconds"] * cell["committed_per_verify"] / (cell["tokens"] - cell["batch"])


def fastest_cells(record: Dict[str, Any]) -> Dict[tuple, Dict[str, Any]]:
    """``{(batch, acceptance): cell}`` of the round with the most tokens/s in each cell (a record without
    rounds: its cells)."""
    fastest: Dict[tuple, Dict[str, Any]] = {}
    for cells_of_round in record.get("rounds") or [record["cells"]]:
        for c in cells_of_round:
            key = (c["batch"], c["acceptance"])
            if key not in fastest or c["tokens_per_s"] > fastest[key]["tokens_per_s"]:
                fastest[key] = c
    return fastest


DRAFT_BAR = 0.97
"""Issue 22's bar: DFLASH_BLOCK at the full block within 3% of SGLang's DFLASH in tokens/s at every batch size."""


def cell_round_ratios(results: List[Dict[str, Any]], label: str, against: str) -> Dict[tuple, List[float]]:
    """``{(batch, acceptance): [tokens/s of label ÷ against, one per round]}``, each ratio from the same round of
    a group (a record without rounds counts as one); ``against``'s cells without an acceptance (plain decoding)
    stand for every acceptance; empty where either engine did not finish."""
    by_label = {r["label"]: r for r in results if r.get("ok")}
    if label not in by_label or against not in by_label:
        return {}
    rounds = [by_label[x].get("rounds") or [by_label[x]["cells"]] for x in (label, against)]
    ratios: Dict[tuple, List[float]] = {}
    for mine, theirs in zip(*rounds):
        base = {(c["batch"], c["acceptance"]): c["tokens_per_s"] for c in theirs}
        for c in mine:
            key = (c["batch"], c["acceptance"])
            ratios.setdefault(key, []).append(c["tokens_per_s"] / base.get(key, base.get((c["batch"], None))))
    return ratios


def round_ratios(results: List[Dict[str, Any]], label: str, against: str) -> Dict[int, List[float]]:
    """``{batch: [...]}``: :func:`cell_round_ratios` of two engines with one cell per batch size."""
    return {batch: ratios for (batch, _), ratios in cell_round_ratios(results, label, against).items()}


def _rounds_ratio(values: List[float]) -> str:
    """``median (lowest-highest, rounds)`` of per-round ratios, ``-`` for none."""
    return f"{lower_median(values):.3f} ({min(values):.3f}-{max(values):.3f}, {len(values)})" if values else "-"


def draft_verdict(values: List[float]) -> str:
    """The :data:`DRAFT_BAR` verdict on the median of per-round ratios, ``-`` for none."""
    return "-" if not values else ("met" if lower_median(values) >= DRAFT_BAR else "missed")


def draft_model_table(results: List[Dict[str, Any]]) -> str:
    """Issue 22's speed table: DFLASH_BLOCK at W = B = 16 against SGLang's DFLASH, and at W = 4 against W = 16,
    per batch size: median tokens/s, the median of the per-round ratios and their range, the bar."""
    r = cells(results)
    native, block, part = "dflash_native_ndt16", "dflash_block_ndt16", "dflash_block_w4_ndt16"
    vs_native, vs_block = round_ratios(results, block, native), round_ratios(results, part, block)
    head = ["batch", "plain", "native DFLASH", "DFLASH_BLOCK W = 16", "W = 4", "W = 16 ÷ native (rounds)",
            "bar", "W = 4 ÷ W = 16 (rounds)"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    for b in DRAFT_BATCHES:
        figures = [r.get(label, {}).get((b, ACCEPTANCES[0])) for label in ("plain", native, block, part)]
        ratios = vs_native.get(b, [])
        rows.append("| " + " | ".join([str(b)] + ["-" if v is None else f"{v:.0f}" for v in figures]
                                       + [_rounds_ratio(ratios), draft_verdict(ratios),
                                          _rounds_ratio(vs_block.get(b, []))]) + " |")
    return "\n".join(rows)


OVERLAP_PAIRS = (("dflash_block_ovl_ndt16", "dflash_native_ovl_ndt16"), ("dflash_block_w4_ovl_ndt16", "dflash_block_ovl_ndt16"),
                 ("dflash_native_ovl_ndt16", "dflash_native_ndt16"), ("plain", "plain_sync"))
"""Issue 48's ratios: DFLASH_BLOCK with overlap against native DFLASH with overlap (the bar, :data:`DRAFT_BAR`),
W = 4 against W = 16, and what SGLang's overlap scheduler is worth to native DFLASH and to plain decoding."""


def group_round_ratios(results: List[Dict[str, Any]], label: str, against: str) -> Dict[int, List[float]]:
    """``{batch: [label ÷ against, one per round]}``: from the rounds of a group that held both, else through the
    ``plain_sync`` control each of their groups held (``label ÷ plain_sync`` of one group's round ``i`` over
    ``against ÷ plain_sync`` of the other's round ``i``)."""
    def by_group(name):
        return {tuple(r["group"]): r for r in results if r.get("ok") and r["label"] == name and r.get("group")}

    mine, theirs = by_group(label), by_group(against)
    shared = [g for g in mine if g in theirs]
    if shared:
        return round_ratios([mine[shared[-1]], theirs[shared[-1]]], label, against)
    control = by_group("plain_sync")
    for g in mine:
        for h in theirs:
            if g in control and h in control:
                a = round_ratios([mine[g], control[g]], label, "plain_sync")
                b = round_ratios([theirs[h], control[h]], against, "plain_sync")
                return {batch: [x / y for x, y in zip(a[batch], b.get(batch, []))] for batch in a}
    return {}


def overlap_table(results: List[Dict[str, Any]]) -> str:
    """Issue 48's table per batch size: each pair of :data:`OVERLAP_PAIRS`, the median of its per-round
    ratios and their range (:func:`group_round_ratios`); the bar on DFLASH_BLOCK ÷ native DFLASH, both
    overlapped."""
    ratios = [group_round_ratios(results, label, against) for label, against in OVERLAP_PAIRS]
    head = ["batch", "DFLASH_BLOCK ÷ native DFLASH (overlap)", "bar", "W = 4 ÷ W = 16 (overlap)",
            "native DFLASH overlap ÷ sync", "plain overlap ÷ sync"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    for b in DRAFT_BATCHES:
        bar = ratios[0].get(b, [])
        rows.append("| " + " | ".join([str(b), _rounds_ratio(bar), draft_verdict(bar)]
                                      + [_rounds_ratio(r.get(b, [])) for r in ratios[1:]]) + " |")
    return "\n".join(rows)


def overlap_acceptance_table(results: List[Dict[str, Any]]) -> str:
    """Issue 48's bars on the controlled-acceptance cells, per (acceptance, batch), each a median of per-round
    ratios (lowest-highest, rounds) within one group: each overlapped CONTROLLED_ACCEPTANCE engine ÷ its group's
    plain decoding, whether the lowest of them is at least :data:`BAR` ``["vs_plain"]``, and the controller ÷
    each static width that shared its group."""
    groups: Dict[tuple, List[Dict[str, Any]]] = {}
    for r in results:
        if r.get("ok") and r.get("group"):
            groups.setdefault(tuple(r["group"]), []).append(r)
    vs_plain, vs_static = {}, {}
    for group in groups.values():
        labels = {r["label"] for r in group}
        for label in labels:
            if OVL in label and spec_of(label)["kind"] in ACCEPTANCE_KINDS and "plain" in labels:
                vs_plain[label] = cell_round_ratios(group, label, "plain")
            if OVL in label and spec_of(label)["kind"] == "static":
                for controller in (x for x in labels if OVL in x and spec_of(x)["kind"] == "controller"):
                    vs_static[f"{controller} ÷ {label}"] = cell_round_ratios(group, controller, label)
    labels = sorted(vs_plain, key=list(ENGINES).index)
    head = (["acceptance", "batch"] + [f"{label} ÷ plain" for label in labels] + ["lowest", "bar (0.98)"]
            + sorted(vs_static))
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for a in ACCEPTANCES:
        for b in BATCHES:
            found = [vs_plain[label].get((b, a), []) for label in labels]
            lowest = min(lower_median(values) for values in found if values)
            rows.append("| " + " | ".join([str(a), str(b)] + [_rounds_ratio(values) for values in found]
                                           + [f"{lowest:.3f}", "met" if lowest >= BAR["vs_plain"] else "missed"]
                                           + [_rounds_ratio(vs_static[k].get((b, a), [])) for k in sorted(vs_static)])
                        + " |")
    return "\n".join(rows)


def _graph_kind(record: Dict[str, Any]) -> str:
    """The graphs an engine's decode steps replay: a speculative engine's TARGET_VERIFY graphs, else decode's."""
    return "target_verify" if "target_verify_graph_capture_s" in record else "target_decode"


def relog(results: Path, log_dirs: List[Path]) -> List[Dict[str, Any]]:
    """The results with each finished engine's log fields (``read_log``) read again from ``<dir>/<label>.log``,
    the last of ``log_dirs`` holding one winning (the calls' ``logs.tar.xz``, oldest first)."""
    records = read_results(results)
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
    p_together = sub.add_parser("together", help="engines resident together, timed in rounds (on the H200)")
    p_together.add_argument("--out", required=True)
    p_together.add_argument("--labels", required=True, help="comma-separated, started in this order")
    p_together.add_argument("--rounds", type=int, default=3)
    p_together.add_argument("--state", help="a directory holding earlier calls' results and continuations")
    p_together.add_argument("--deadline", type=float, default=480, help="no round starts that would end later")
    p_together.add_argument("--cell-seconds", type=float, default=120, help="the most one engine's cells may take")
    p_together.add_argument("--profile", action="store_true",
                            help="after the rounds, one batch per engine under SGLang's profiler (profile_engine; "
                                 "E2E_PROFILE_BATCH requests, default 1)")
    p_together.add_argument("--profile-only", help="comma-separated labels: profile only these engines")
    p_engine = sub.add_parser("engine", help="one engine (run starts it in its own process)")
    p_engine.add_argument("label", type=engine_label)
    p_engine.add_argument("--out", required=True)
    p_resident = sub.add_parser("resident", help="one engine of a group (together starts it in its own process)")
    p_resident.add_argument("label", type=engine_label)
    p_resident.add_argument("--out", required=True)
    p_resident.add_argument("--address", required=True)
    p_tables = sub.add_parser("tables", help="print the tables of a results file (results/HISTORY.md holds each run's)")
    p_tables.add_argument("results", type=Path)
    p_tables.add_argument("--with", dest="others", type=Path, action="append", default=[],
                          help="a results file whose engines the first lacks join the tables (first given first)")
    p_tables.add_argument("--ndt", type=int, action="append", choices=NDTS, help="only this ndt's table")
    p_tables.add_argument("--against", type=Path, action="append", default=[],
                          help="a results file of another call: the engines both ran, cell by cell (against_table)")
    p_relog = sub.add_parser("relog", help="read the engines' log fields again (print the results file)")
    p_relog.add_argument("results", type=Path)
    p_relog.add_argument("logs", type=Path, nargs="+", help="directories of <label>.log, oldest first")
    args = parser.parse_args(argv)
    if args.command == "relog":
        print("\n".join(json.dumps(r) for r in relog(args.results, args.logs)))
        return 0
    if args.command == "run":
        return run_main(args)
    if args.command == "together":
        return together_main(args)
    if args.command == "tables":
        results = with_others(read_results(args.results), [read_results(path) for path in args.others])
        print(tables(results, args.ndt or NDTS))
        if any(draft_model(r["label"]) for r in results):
            print("\n" + draft_model_table(results))
        overlapped = {spec_of(r["label"])["kind"] for r in results if spec_of(r["label"]).get("overlap") and r.get("ok")}
        if overlapped & {"dflash", "dflash_block"}:
            print("\n" + overlap_table(results))
        if overlapped & set(ACCEPTANCE_KINDS):
            print("\n" + overlap_acceptance_table(results))
        if any(r.get("kind") == "cycle" and r.get("ok") for r in results):
            print("\n" + switch_table(results))
        if any(BUILD_SEP in r["label"] and r.get("ok") for r in results):
            print("\n" + builds_table(results))
        if args.against:
            print("\n" + against_table(read_results(args.results), [r for path in args.against for r in read_results(path)]))
        return 0
    record = {"label": args.label, "ok": False}
    try:
        record = engine_main(args.label, Path(args.out)) if args.command == "engine" else \
            resident_main(args.label, Path(args.out), args.address)
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
