"""Whether flashinfer's workspace holds the verify graphs SGLang will capture.

SGLang captures a TARGET_VERIFY CUDA graph for each (batch size, width) a
plugin's widths give; on the flashinfer backend each capture plans its
split-KV buffers into one workspace of the size SGLang's environment says
(:mod:`..engine.flashinfer_workspace`). A plan that does not fit stops the
server during capture, after the weights loaded (on the H200: width 16 at
128 requests on a Llama-3-8B shape needs 385 MiB of the default 384 MiB).
:func:`workspace_faults` computes the largest plan's need
(:mod:`..verify_workspace`) while SGLang resolves its arguments and says
which variable to set to what. It judges only what it can read: the target's
config.json (a local folder or a hub id transformers resolves), the listed
capture sizes, the flashinfer backend named or resolved; otherwise it is
silent.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence

from ..engine.facts import TARGET, dp_attention, graph_batch_sizes
from ..policy import VerifyPolicy
from ..verify_workspace import AttentionShape, largest_need
from ..widths_by_batch_size import graph_pairs
from .draft_model_check import read_config

ROUND_TO = 64 << 20
"""The suggested size is the need rounded up to this (64 MiB)."""


def workspace_faults(policy: VerifyPolicy, server_args: Any, version: str, ndt: int, backends: Mapping[str, str],
                     capture_sizes: Optional[Sequence[int]] = None, model_path: Optional[str] = None) -> List[str]:
    """The refusal (one line, or none) of the target's verify graphs at ``ndt``
    whose flashinfer plan overflows the workspace. ``server_args``: SGLang's
    (None where ``check`` could not build them: one rank, no deterministic
    inference); ``capture_sizes``: the batch sizes captured (default: those
    ``server_args`` lists); ``model_path``: the target's (default:
    ``server_args``'). The need is a lower bound: the GPU's SM count (a floor
    that only raises small plans) is not asked, so that resolving a server's
    arguments never touches CUDA."""
    from ..engine.flashinfer_workspace import workspace_setting

    if backends.get(TARGET) != "flashinfer" or getattr(server_args, "enable_deterministic_inference", False):
        return []  # deterministic inference plans graphs without split KV
    sizes = capture_sizes or graph_batch_sizes(server_args)
    config, _ = read_config(model_path or getattr(server_args, "model_path", None))
    setting = workspace_setting()
    shape = attention_shape(config, server_args) if isinstance(config, dict) else None
    if not sizes or shape is None or setting is None:
        return []
    architectures = [str(a) for a in config.get("architectures") or []]
    configured = setting.size(architectures)
    if configured is None:
        return []
    size, source, settable = configured
    buckets = policy.widths_by_batch_size(ndt, False)
    pairs = graph_pairs(buckets, sizes) if buckets is not None else [(s, policy.width(ndt, False)) for s in sizes]
    found = largest_need(pairs, shape)
    if found is None or found[0] <= size:
        return []
    need, batch_size, width = found
    bound = " at least (without the SM-count floor, which only raises small plans)"
    suggested = -(-need // ROUND_TO) * ROUND_TO
    fix = (f"set {setting.env}={suggested} ({suggested >> 20} MiB) or more in the server's environment"
           if settable else "the variable cannot raise it for this architecture")
    return [f"the CUDA graph of TARGET_VERIFY at batch size {batch_size} and width {width} (ndt {ndt}) on flashinfer "
            f"needs{bound} {need} bytes ({need / 2 ** 20:.1f} MiB) of flashinfer workspace for its split-KV buffers "
            f"(batch_prefill_tmp_v and _tmp_s; {shape}), more than the {size} bytes ({size >> 20} MiB) SGLang "
            f"{version} allocates ({source}); SGLang would stop while capturing graphs: {fix}, or capture fewer "
            f"requests at that width (--cuda-graph-max-bs, widths_by_batch_size)"]


def attention_shape(config: Mapping[str, Any], server_args: Any) -> Optional[AttentionShape]:
    """The heads one tensor-parallel rank of the target computes (its text
    config's for a multimodal model; KV heads replicated where there are
    fewer than ranks, as SGLang does); None where config.json does not say."""
    text = config.get("text_config") if "num_attention_heads" not in config else config
    if not isinstance(text, Mapping):
        return None
    heads, kv_heads = text.get("num_attention_heads"), text.get("num_key_value_heads") or text.get("num_attention_heads")
    head_dim = text.get("head_dim") or (text.get("hidden_size", 0) // heads if heads else None)
    if not all(isinstance(v, int) and v > 0 for v in (heads, kv_heads, head_dim)):
        return None
    ranks = getattr(server_args, "tp_size", 1) or 1
    if dp_attention(server_args):
        ranks //= max(1, getattr(server_args, "attn_dp_size", None) or getattr(server_args, "dp_size", 1) or 1)
    ranks = max(1, ranks)
    return AttentionShape(max(1, heads // ranks), max(1, kv_heads // ranks), head_dim)
