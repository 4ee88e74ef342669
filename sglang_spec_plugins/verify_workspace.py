"""The float workspace flashinfer's prefill planner takes for a verify captured in a CUDA graph.

SGLang's flashinfer backend sends TARGET_VERIFY to a
``BatchPrefillWithPagedKVCacheWrapper`` with a custom mask (so flashinfer's
FA2 kernels, whose planner is ``PrefillPlan`` in
``include/flashinfer/attention/scheduler.cuh``). Planned for a CUDA graph,
that planner always splits the KV (``PrefillBinarySearchKVChunkSize``
returns ``split_kv`` true under ``enable_cuda_graph``) and takes two float
buffers out of the workspace, ``batch_prefill_tmp_v`` and
``batch_prefill_tmp_s``, sized from the capture's ``batch_size`` requests and
``total_num_rows = batch_size * width`` query rows, per tensor-parallel rank:

- ``gqa = num_qo_heads // num_kv_heads``; ``max_qo_len = (total_num_rows - batch_size + 1) * gqa``
- ``cta_tile_q`` (``FA2DetermineCtaTileQ(max_qo_len, head_dim)``): head_dim
  >= 512: 16 up to 32 rows, else 32; otherwise 128 above 64 rows when
  head_dim < 256, else 64 above 16 rows, else 16 (Ampere or newer)
- ``tiles = ceil(total_num_rows * gqa / cta_tile_q) + batch_size - 1``
- ``padded = max(2 * num_SMs // num_kv_heads, tiles)``
- ``tmp_v = num_qo_heads * padded * cta_tile_q * head_dim * 4`` bytes,
  ``tmp_s = num_qo_heads * padded * cta_tile_q * 4`` bytes

The plan fails ("Buffer overflow when allocating memory for
batch_prefill_tmp_s ... Increase the workspace buffer size") when their sum
exceeds the workspace. Read off flashinfer 0.6.14; SGLang 0.5.16 sizes its
full-graph EXTEND workspace by the same rule
(``FlashInferAttnBackend._full_cg_prefill_workspace_bytes``). Without the SM
count (the start-up check does not ask the GPU) the ``2 * num_SMs`` floor is
left out, so the figure is a lower bound (the floor only raises small plans).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Tuple


@dataclass(frozen=True)
class AttentionShape:
    """The attention heads one tensor-parallel rank computes."""

    num_qo_heads: int
    num_kv_heads: int
    head_dim: int

    def __str__(self) -> str:
        return f"{self.num_qo_heads} query heads, {self.num_kv_heads} KV heads and head_dim {self.head_dim} per rank"


def cta_tile_q(packed_qo_len: int, head_dim: int) -> int:
    """flashinfer's ``FA2DetermineCtaTileQ`` on Ampere or newer."""
    if head_dim >= 512:
        return 16 if packed_qo_len <= 32 else 32
    if packed_qo_len > 64 and head_dim < 256:
        return 128
    return 64 if packed_qo_len > 16 else 16


def verify_workspace_bytes(batch_size: int, width: int, shape: AttentionShape, sm_count: Optional[int] = None) -> int:
    """Bytes of float workspace the plan of a CUDA graph of ``batch_size``
    requests verifying ``width`` tokens each takes (``tmp_v`` + ``tmp_s``);
    without ``sm_count``, a lower bound (see the module doc)."""
    gqa = shape.num_qo_heads // shape.num_kv_heads
    rows = batch_size * width
    tile = cta_tile_q((rows - batch_size + 1) * gqa, shape.head_dim)
    padded = -(-rows * gqa // tile) + batch_size - 1
    if sm_count is not None:
        padded = max(2 * sm_count // shape.num_kv_heads, padded)
    per_head_dim = shape.num_qo_heads * padded * tile * 4
    return per_head_dim * shape.head_dim + per_head_dim


def largest_need(pairs: Iterable[Tuple[int, int]], shape: AttentionShape,
                 sm_count: Optional[int] = None) -> Optional[Tuple[int, int, int]]:
    """``(bytes, batch_size, width)`` of the ``(batch_size, width)`` graph that needs most; None for no pairs."""
    found = [(verify_workspace_bytes(size, width, shape, sm_count), size, width) for size, width in pairs]
    return max(found) if found else None
