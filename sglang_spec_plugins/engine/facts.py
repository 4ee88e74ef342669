"""Facts about a running SGLang that several rooms read: the configured ndt a
backend lays a verify out with, which attention backend each worker sends
TARGET_VERIFY to, whether attention runs data-parallel, and the batch sizes
SGLang captures CUDA graphs at."""

from __future__ import annotations

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


def verify_backends(server_args: Any) -> Dict[str, str]:
    """The attention backend each worker runs TARGET_VERIFY through, as the
    operator named it (``{}`` where none is named: SGLang picks one later, and
    the loader's gate judges it when it is built). SGLang's hybrid backend
    sends TARGET_VERIFY to the decode backend when
    ``speculative_attention_mode`` is "decode", else to the prefill backend;
    each falls back to ``attention_backend``; the draft worker uses
    ``speculative_draft_attention_backend`` where given."""
    common = getattr(server_args, "attention_backend", None)
    mode = getattr(server_args, "speculative_attention_mode", None) or "prefill"
    target = getattr(server_args, f"{mode}_attention_backend", None) or common
    draft = getattr(server_args, "speculative_draft_attention_backend", None) or target
    return {worker: name for worker, name in ((TARGET, target), (DRAFT, draft)) if name}


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
