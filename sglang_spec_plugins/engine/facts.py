"""Facts about a running SGLang that several rooms read: the configured ndt a
backend lays a verify out with, whether the overlap scheduler runs, which
attention backend each worker sends TARGET_VERIFY to, whether attention runs
data-parallel, and the batch sizes SGLang captures CUDA graphs at."""

from __future__ import annotations

import ast
import functools
import importlib
import re
from typing import Any, Dict, Optional, Tuple

TARGET, DRAFT = "target worker", "draft worker"
"""The two workers that may run TARGET_VERIFY, as messages name them."""


def configured_ndt(model_runner: Any) -> int:
    """``speculative_num_draft_tokens`` where the attention backends read it:
    the runtime context (0.5.17+), else the runner's server args."""
    try:
        from sglang.srt.runtime_context import get_spec
    except ImportError:
        return model_runner.server_args.speculative_num_draft_tokens
    return get_spec().speculative_num_draft_tokens


def overlap_scheduled(server_args: Any) -> bool:
    """Whether SGLang's overlap scheduler runs the workers: its schedule config's
    ``disable_overlap_schedule`` where the release resolves it there (0.5.17+,
    once a config is published; what the scheduler reads from 0.5.19), else the
    server args' (off where they do not say)."""
    try:
        from sglang.srt.runtime_context import get_schedule

        return not get_schedule().disable_overlap_schedule
    except (ImportError, AttributeError, AssertionError, ValueError, RuntimeError):  # none, or nothing published
        return not getattr(server_args, "disable_overlap_schedule", True)


def steps_in_flight(server_args: Any) -> int:
    """How many of a worker's steps may still run on the device when its next step
    starts: 1 under SGLang's overlap scheduler (:func:`overlap_scheduled`), else 0.
    What a step reads of its own earlier results it reads this many steps late."""
    return int(overlap_scheduled(server_args))


def verify_backends(server_args: Any) -> Dict[str, str]:
    """The attention backend each worker runs TARGET_VERIFY through, as the
    operator named it (``{}`` where none is named: SGLang picks one later, and
    the loader's gate judges it when it is built). SGLang's hybrid backend
    sends TARGET_VERIFY to the decode backend when
    ``speculative_attention_mode`` is "decode", else to the prefill backend;
    each falls back to ``attention_backend``; the draft worker uses
    ``speculative_draft_attention_backend`` where given (the draft-worker builder
    may then give it another: :func:`draft_backend`)."""
    common = getattr(server_args, "attention_backend", None)
    mode = getattr(server_args, "speculative_attention_mode", None) or "prefill"
    target = getattr(server_args, f"{mode}_attention_backend", None) or common
    draft = getattr(server_args, "speculative_draft_attention_backend", None) or target
    return {worker: name for worker, name in ((TARGET, target), (DRAFT, draft)) if name}


DRAFT_WORKER_BUILDER = "sglang.srt.speculative.draft_worker_common"
"""The module whose ``build_draft_tp_worker`` gives a draft worker its attention backend (0.5.16+)."""


def draft_backend(named: Optional[str]) -> Optional[str]:
    """The attention backend the release's draft-worker builder gives a draft worker asked for ``named``
    (``--speculative-draft-attention-backend``, else the target's): ``named`` where its draft workers take
    it, else the backend it falls back to on this machine (:func:`draft_backend_rule`)."""
    rule = draft_backend_rule()
    if named is None or rule is None or named in rule[0]:
        return named
    return rule[1]


@functools.lru_cache(maxsize=None)
def draft_backend_rule() -> Optional[Tuple[Tuple[str, ...], str]]:
    """``(the backends the release's draft workers take, the one any other falls back to here)``, read off
    :data:`DRAFT_WORKER_BUILDER`'s source (nothing of it imported): the tuple it names
    (``_SUPPORTED_DRAFT_BACKENDS`` in 0.5.16-0.5.18; ``DRAFT_ATTENTION_BACKEND_CHOICES`` from 0.5.19, its
    value read from the argument choices) and its ``"triton" if <ROCm or XPU> else "flashinfer"``. None
    where the release has no such builder (0.5.14-0.5.15 build a draft worker on the backend named) or it
    reads otherwise."""
    from .probe import source_file

    path = source_file(DRAFT_WORKER_BUILDER)
    if path is None:
        return None
    text = path.read_text(encoding="utf-8")
    fallback = re.search(r'"(\w+)"\s+if\s+\(?[^"\n]*\b(hip|is_xpu)\b[^"\n]*\)?\s+else\s+"(\w+)"', text)
    choices: Any = None
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_SUPPORTED_DRAFT_BACKENDS"
                                                for t in node.targets):
            choices = ast.literal_eval(node.value)
    if choices is None and "DRAFT_ATTENTION_BACKEND_CHOICES" in text:
        for module in ("sglang.srt.arg_groups.choices", "sglang.srt.server_args"):
            try:
                choices = getattr(importlib.import_module(module), "DRAFT_ATTENTION_BACKEND_CHOICES")
                break
            except (ImportError, AttributeError):
                continue
    if fallback is None or not choices:
        return None
    import torch

    other = getattr(torch.version, "hip", None) or getattr(getattr(torch, "xpu", None), "is_available", lambda: False)()
    return tuple(choices), fallback.group(1) if other else fallback.group(3)


def dp_attention(server_args: Any) -> bool:
    """Whether the server runs attention data-parallel: ``--enable-dp-attention``
    (up to 0.5.22), or ``attn_dp_size`` above 1 (0.5.23's ``--attn-dp-size``;
    0.5.23 also rewrites ``--enable-dp-attention --dp-size N`` into it, and
    clears the flag, before any plugin validator runs)."""
    return bool(getattr(server_args, "enable_dp_attention", False)) or (getattr(server_args, "attn_dp_size", None) or 1) > 1


def graph_batch_sizes(server_args: Any) -> Optional[Tuple[int, ...]]:
    """The batch sizes SGLang captures decode and TARGET_VERIFY CUDA graphs at,
    as the resolved arguments list them (``cuda_graph_config.decode`` on
    0.5.16+; where a release folds that in only later, as 0.5.19 does, the
    ``--cuda-graph-bs-decode`` list; ``cuda_graph_bs`` before 0.5.16), at most ``max_running_requests``
    where it is set (SGLang then captures that size itself); ``()`` when
    those graphs are off; None where the arguments list no sizes."""
    decode = getattr(getattr(server_args, "cuda_graph_config", None), "decode", None)
    if decode is not None:
        if getattr(decode, "backend", None) == "disabled":
            return ()
        sizes = getattr(decode, "bs", None)
    elif (getattr(server_args, "disable_cuda_graph", False)
          or getattr(server_args, "cuda_graph_backend_decode", None) == "disabled"):
        return ()
    else:
        sizes = getattr(server_args, "cuda_graph_bs_decode", None) or getattr(server_args, "cuda_graph_bs", None)
    if not sizes:
        return None
    cap = getattr(server_args, "max_running_requests", None)
    if isinstance(cap, int) and max(sizes) > cap:
        sizes = [s for s in sizes if s <= cap] + [cap]
    return tuple(sorted(set(sizes)))
