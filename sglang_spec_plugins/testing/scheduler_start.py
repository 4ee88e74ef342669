"""Start SGLang's real ``Scheduler`` on a CPU with a plugin algorithm's worker.

``python -m sglang_spec_plugins.testing.scheduler_start ALGORITHM [--worker
module:Class] [--ndt N] [--draft DIR] [--overlap off]`` loads the plugins through SGLang's own ``load_plugins()``,
publishes the server arguments where SGLang's ``run_scheduler_process`` does,
and runs the installed release's whole ``Scheduler.__init__``: the real
``TpModelWorker`` (a two-layer random Llama made here, ``load_format=dummy``,
``device=cpu``, torch.distributed over gloo, its real KV pools), then
``create_worker`` and the plugin's worker, the memory pools, attention
backends and graphs of both workers, the KV-cache builder, HiCache draft
registration, disaggregation, weight updater, metrics and the rest, as a
server does before its first request (CUDA graphs off: there is no CUDA;
the graph-capture steps run and capture nothing). ``--worker`` replaces the algorithm's
factory with one returning that class. It prints one JSON line: ``started``
and what the scheduler holds, or the exception and the SGLang frames it
went through; ``kv_bytes_per_token``, the KV bytes per token each pool
configurator budgeted the memory with (the target's, and the draft's where
SGLang counts it).

One process per start: ``Scheduler.__init__`` sets up torch.distributed,
ZMQ sockets and a watchdog thread once per process. Stand-ins: only the GPU
kernel packages of :data:`KERNEL_PACKAGES` (``cpu.absent_kernel_package``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "torch_dtype": "float32",
    "bos_token_id": 1, "eos_token_id": 2,
}


KERNEL_PACKAGES = {"vllm": ("_custom_ops",), "sgl_kernel": ("kvcacheio",)}
"""GPU kernel packages SGLang imports (never calls, here) on the way:
``vllm._custom_ops`` by the rotary embedding on a machine that is neither
CUDA nor a CPU-engine build, ``sgl_kernel.kvcacheio`` by the host memory pool
up to 0.5.12. Stand-ins only where the package is not installed."""


def start(algorithm: str, worker: Optional[str] = None, ndt: int = 4, draft: Optional[str] = None,
          overlap: bool = True) -> Dict[str, Any]:
    """Run ``Scheduler.__init__`` in this process (see the module doc; ``draft``:
    the ``--speculative-draft-model-path`` folder; ``overlap`` False: with
    ``--disable-overlap-schedule``, else overlap as the algorithm declares)."""
    cell_sizes: List[int] = []
    try:  # the spy goes on once the loader has patched the configurator
        scheduler = make_scheduler(algorithm, worker, ndt, draft=draft, before_init=lambda _: _record_cell_sizes(cell_sizes),
                                   **({"attention_backend": "triton"} if draft else {}),  # a draft runner's: on a CPU
                                   **({} if overlap else {"disable_overlap_schedule": True}))
    except Exception as exc:
        return {"started": False, "error": f"{type(exc).__name__}: {exc}", "frames": _sglang_frames(exc)}
    spec = scheduler.draft_worker
    return {
        "kv_bytes_per_token": cell_sizes,
        "started": True,
        "target_worker": type(scheduler.tp_worker).__name__,
        "spec_worker": f"{type(spec).__module__}.{type(spec).__qualname__}",
        "model_worker_is_spec_worker": scheduler.model_worker is spec,
        "max_total_num_tokens": scheduler.max_total_num_tokens,
        "tree_cache": type(scheduler.tree_cache).__name__,
    }


def make_scheduler(algorithm: Optional[str], worker: Optional[str] = None, ndt: int = 4,
                   before_init: Optional[Callable[[Any], None]] = None, model: Optional[Path] = None,
                   draft: Optional[Path] = None, tokenizer: bool = False, **server_args: Any):
    """The installed release's real ``Scheduler`` on the tiny Llama (see the
    module doc); ``algorithm`` None starts it without speculative decoding.
    ``model``: a target folder instead (its ``config.json``, and its weights
    where it has a ``model.safetensors``, else dummy weights); ``draft``: the
    ``--speculative-draft-model-path`` folder (dummy weights unless it has a
    ``model.safetensors``); ``tokenizer``: the tiny Llama gets
    :func:`write_byte_tokenizer`'s tokenizer, and SGLang loads it (grammars need
    one). ``server_args`` add to or replace the defaults (names a release
    lacks are dropped); ``before_init(port_args)`` runs just before ``Scheduler.__init__``."""
    os.environ.setdefault("TRITON_INTERPRET", "1")  # SGLang's Triton kernels (KV-pool warm-up) run interpreted
    from .cpu import absent_kernel_package, install_stand_ins, run_sglang_plugin_loading

    install_stand_ins()
    for package, submodules in KERNEL_PACKAGES.items():
        if importlib.util.find_spec(package) is None:
            absent_kernel_package(_SysModules(), package, *submodules)
    run_sglang_plugin_loading()
    if algorithm == "DFLASH":  # SGLang's own, the reference: its CPU stand-ins edit after the loader's patches
        from .native_dflash import serve_dflash_on_cpu

        serve_dflash_on_cpu()

    from sglang.srt.server_args import PortArgs, ServerArgs
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    supports_overlap = False
    if algorithm is not None:
        algo = SpeculativeAlgorithm.from_string(algorithm)
        supports_overlap = getattr(algo, "supports_overlap", False)
        if worker is not None:
            module, _, name = worker.partition(":")
            cls = getattr(importlib.import_module(module), name)
            algo.factory = lambda server_args: cls
    written = None
    if model is None:
        model = written = Path(tempfile.mkdtemp(prefix="tiny-llama-"))
        (model / "config.json").write_text(json.dumps(TINY_LLAMA))
        if tokenizer:
            write_byte_tokenizer(model)
    fields = dict(model_path=str(model), load_format=_load_format(model), device="cpu", skip_tokenizer_init=not tokenizer,
                  speculative_algorithm=algorithm, disable_overlap_schedule=not supports_overlap,
                  max_total_tokens=2048, disable_cuda_graph=True, disable_piecewise_cuda_graph=True)
    if algorithm is not None:
        fields["speculative_num_draft_tokens"] = ndt
    if draft is not None:
        fields.update(speculative_draft_model_path=str(draft), speculative_draft_load_format=_load_format(draft))
    fields.update(server_args)
    known = set(inspect.signature(ServerArgs).parameters)  # graph flags differ by release
    args = ServerArgs(**{name: value for name, value in fields.items() if name in known})
    port_args = PortArgs.init_new(args)
    _publish(args)
    if before_init is not None:
        before_init(port_args)

    from sglang.srt.managers.scheduler import Scheduler

    ranks = {name: (None if name == "dp_rank" else 0)
             for name in list(inspect.signature(Scheduler.__init__).parameters)[3:]}
    try:
        return Scheduler(args, port_args, **ranks)
    finally:
        if written is not None:
            shutil.rmtree(written, ignore_errors=True)


def write_byte_tokenizer(folder: Path, config: Optional[Dict[str, Any]] = None) -> None:
    """A byte-level tokenizer of a Llama's vocabulary into ``folder``
    (``tokenizer.json`` and its config, as transformers loads them), for the
    model ``config`` (default :data:`TINY_LLAMA`, 256 tokens): token ``b`` below
    256 is byte ``b``, each token above is three letters of its own; BOS and EOS
    are the config's. Made with ``tokenizers``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    config = TINY_LLAMA if config is None else config
    shown = _byte_characters()
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    vocab = {shown[b]: b for b in range(256)}
    for token in range(256, config["vocab_size"]):
        n = token - 256
        vocab[letters[n // 52 ** 2 % 52] + letters[n // 52 % 52] + letters[n % 52]] = token
    made = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    made.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    made.decoder = decoders.ByteLevel()
    made.save(str(Path(folder) / "tokenizer.json"))
    (Path(folder) / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": shown[config["bos_token_id"]],
        "eos_token": shown[config["eos_token_id"]], "model_max_length": config["max_position_embeddings"]}))


def _byte_characters() -> Dict[int, str]:
    """The printable character byte-level tokenizers (GPT-2's) show each byte as."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shown, extra = {}, 0
    for byte in range(256):
        if byte in kept:
            shown[byte] = chr(byte)
        else:
            shown[byte] = chr(256 + extra)
            extra += 1
    return shown


def _load_format(folder: Path) -> str:
    """``auto`` for a folder holding weights, ``dummy`` for one holding only a config."""
    return "auto" if (Path(folder) / "model.safetensors").is_file() else "dummy"


class _SysModules:
    """``absent_kernel_package`` sets its modules through this (for the whole process)."""

    @staticmethod
    def setitem(mapping, key, value):
        mapping[key] = value


def _publish(args) -> None:
    """What ``run_scheduler_process`` publishes before it makes the Scheduler
    (0.5.19+: ``runtime_context.publish``; earlier releases publish nothing
    there, the target's ``ModelRunner`` sets the global server args)."""
    try:
        from sglang.srt.runtime_context import publish
    except ImportError:
        return
    extra = {}
    if "ranks" in inspect.signature(publish).parameters:
        from sglang.srt.runtime_context import SpawnRanks

        extra["ranks"] = SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0)
    publish(args, role="scheduler", **extra)


def _record_cell_sizes(sizes: List[int]) -> None:
    """Have ``sizes`` get the KV bytes per token each of SGLang's pool
    configurators (``model_executor/pool_configurator.DefaultPoolConfigurator``)
    budgets the memory with: the target's, the draft pool's included where
    SGLang counts it. Nothing where the release has no such class."""
    try:
        from sglang.srt.model_executor.pool_configurator import DefaultPoolConfigurator
    except ImportError:
        return
    init = DefaultPoolConfigurator.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        sizes.append(int(self._cell_size))

    DefaultPoolConfigurator.__init__ = recording


def _sglang_frames(exc: BaseException) -> List[str]:
    """``file:line function`` of each frame of the traceback inside ``sglang/srt``."""
    frames = traceback.extract_tb(exc.__traceback__)
    return [f"{Path(f.filename).as_posix().split('sglang/srt/')[-1]}:{f.lineno} {f.name}"
            for f in frames if "sglang/srt/" in Path(f.filename).as_posix()]


def main(argv: List[str]) -> int:
    algorithm = argv[0]
    options = dict(zip(argv[1::2], argv[2::2]))
    result = start(algorithm, options.get("--worker"), int(options.get("--ndt", 4)), options.get("--draft"),
                   overlap=options.get("--overlap", "on") != "off")
    print(json.dumps(result), flush=True)
    sys.stdout.flush()
    os._exit(0)  # the scheduler's threads and sockets would keep the process alive


if __name__ == "__main__":
    main(sys.argv[1:])
