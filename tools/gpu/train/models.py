"""The target (a Llama) and its DFlash draft in plain torch, computing what SGLang 0.5.16 serves from their checkpoints.

:class:`Llama` has transformers' ``LlamaForCausalLM`` parameter names (``model.layers.{i}.self_attn.q_proj.weight``
...), so its ``state_dict`` is the checkpoint SGLang's ``models/llama.py`` loads: RMSNorm in float32, rotary
embedding with halves rotated (neox style, SGLang's default for Llama), grouped-query attention (query head ``i``
reads key/value head ``i // (heads / kv_heads)``), SiLU-gated MLP, untied LM head. ``capture`` returns the
residual stream after each layer named, what SGLang's Llama captures for DFLASH (``set_dflash_layers_to_capture``
takes ``hidden_states + residual`` before layer ``id + 1``: so a captured layer must be below the last).

:class:`DFlashDraft` has the parameter names ``models/dflash.py``'s ``DFlashDraftModel.load_weights`` reads
(``layers.{i}.self_attn.{q,k,v,o}_proj``, ``q_norm``, ``k_norm``, ``input_layernorm``,
``post_attention_layernorm``, ``mlp.{gate,up,down}_proj``, ``norm``, ``fc``, ``hidden_norm``) and computes what
SGLang's DFLASH worker (``speculative/dflash_worker_v2.py``) computes for one draft block:

* the context: for every token before the block's root, ``hidden_norm(fc(concat of the captured target
  layers))`` (``project_target_hidden``), projected by each layer's ``k_proj``/``v_proj`` with no layer norm
  before them (``prepare_context_hidden_for_kv`` returns it as it is), ``k_norm`` and the rotary embedding at
  the token's position (``_append_target_hidden_*``: ``kv_proj_only``, ``apply_k_norm``, ``apply_k_rope``); the
  root itself is not in the context (its hidden state is written after the verify that commits it);
* the block: ``[root, mask x (B - 1)]`` embedded with the target's embedding, at positions ``p .. p + B - 1``
  (``p`` = the root's position = the context's length), through the layers (pre-norm: ``input_layernorm``,
  attention with per-head ``q_norm``/``k_norm`` and the rotary embedding, ``post_attention_layernorm``, MLP;
  the residual adds as SGLang's fused add-and-norm does), attending to the whole context and to every token of
  its own block, none masked (``AttentionType.ENCODER_ONLY``); then ``norm``;
* the drafts: the target's LM head over block positions ``1 .. B - 1``, greedy.

Nothing here imports SGLang; the tests compare :class:`Llama` with transformers' ``LlamaForCausalLM``, and serve
both checkpoints through SGLang's real scheduler.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype)


def rotary(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """``x`` [..., tokens, heads, head_dim] rotated at ``positions`` [..., tokens] (halves rotated), in float32."""
    half = x.shape[-1] // 2
    inv = 1.0 / theta ** (torch.arange(0, half, device=x.device, dtype=torch.float32) / half)
    angles = positions.float()[..., None] * inv  # [..., tokens, half]
    cos, sin = angles.cos()[..., None, :], angles.sin()[..., None, :]
    a, b = x[..., :half].float(), x[..., half:].float()
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).to(x.dtype)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor], causal: bool) -> torch.Tensor:
    """Attention of ``q`` [batch, tokens, heads, d] over ``k``/``v`` [batch, keys, kv_heads, d] (key/value head
    ``i // group`` serves query head ``i``); ``mask`` [batch, tokens, keys] (True: may attend) or ``causal``."""
    def widen(t):  # each key/value head once per query head it serves (expand, not repeat_interleave: no CUDA cumsum)
        b, n, kv, d = t.shape
        return t[:, :, :, None, :].expand(b, n, kv, q.shape[2] // kv, d).reshape(b, n, q.shape[2], d).transpose(1, 2)

    out = F.scaled_dot_product_attention(q.transpose(1, 2), widen(k), widen(v),
                                         attn_mask=None if mask is None else mask[:, None], is_causal=causal)
    return out.transpose(1, 2).flatten(2)


class Attention(nn.Module):
    def __init__(self, c: dict, qk_norm: bool):
        super().__init__()
        hidden, heads, kv, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.heads, self.kv, self.d, self.theta = heads, kv, d, c["rope_theta"]
        self.q_proj = nn.Linear(hidden, heads * d, bias=False)
        self.k_proj = nn.Linear(hidden, kv * d, bias=False)
        self.v_proj = nn.Linear(hidden, kv * d, bias=False)
        self.o_proj = nn.Linear(heads * d, hidden, bias=False)
        if qk_norm:
            self.q_norm, self.k_norm = RMSNorm(d, c["rms_norm_eps"]), RMSNorm(d, c["rms_norm_eps"])

    def keys(self, h: torch.Tensor, positions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Keys (normed where the layer norms them, then rotated) and values of ``h`` [batch, tokens, hidden]."""
        k = self.k_proj(h).unflatten(-1, (self.kv, self.d))
        if hasattr(self, "k_norm"):
            k = self.k_norm(k)
        return rotary(k, positions, self.theta), self.v_proj(h).unflatten(-1, (self.kv, self.d))

    def forward(self, h, positions, context: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        q = self.q_proj(h).unflatten(-1, (self.heads, self.d))
        if hasattr(self, "q_norm"):
            q = self.q_norm(q)
        q = rotary(q, positions, self.theta)
        k, v = self.keys(h, positions)
        if context is not None:
            k, v = torch.cat([context[0], k], 1), torch.cat([context[1], v], 1)
        return self.o_proj(attend(q, k, v, mask, causal=context is None and mask is None))


class MLP(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.gate_proj = nn.Linear(c["hidden_size"], c["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(c["hidden_size"], c["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(c["intermediate_size"], c["hidden_size"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c: dict, qk_norm: bool):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c, qk_norm)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, positions, context=None, mask=None):
        x = x + self.self_attn(self.input_layernorm(x), positions, context, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class _Body(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c, qk_norm=False) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Llama(nn.Module):
    """The target (module doc); ``config``: its ``config.json`` as a dict."""

    def __init__(self, config: dict):
        super().__init__()
        self.config = config
        self.model = _Body(config)
        self.lm_head = nn.Linear(config["hidden_size"], config["vocab_size"], bias=False)

    def forward(self, ids: torch.Tensor, capture: Sequence[int] = ()) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """The final normed hidden states of ``ids`` [batch, tokens] (causal, positions from 0) and the
        residual stream after each layer of ``capture``."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        x, captured = self.model.embed_tokens(ids), []
        for i, layer in enumerate(self.model.layers):
            x = layer(x, positions)
            if i in capture:
                captured.append(x)
        return self.model.norm(x), captured


class DFlashDraft(nn.Module):
    """The draft (module doc); ``config``: its ``config.json`` as a dict (``dflash_config.target_layer_ids``)."""

    def __init__(self, config: dict):
        super().__init__()
        self.config = config
        hidden, eps = config["hidden_size"], config["rms_norm_eps"]
        self.layers = nn.ModuleList(Layer(config, qk_norm=True) for _ in range(config["num_hidden_layers"]))
        self.norm = RMSNorm(hidden, eps)
        self.fc = nn.Linear(len(config["dflash_config"]["target_layer_ids"]) * hidden, hidden, bias=False)
        self.hidden_norm = RMSNorm(hidden, eps)

    def forward(self, block_embeds: torch.Tensor, block_positions: torch.Tensor, features: List[torch.Tensor],
                mask: torch.Tensor) -> torch.Tensor:
        """The normed hidden states of the blocks (``block_embeds`` [batch, n, hidden] at ``block_positions``
        [batch, n]: one or more blocks per row) over the context ``features`` (the captured target layers, each
        [batch, tokens, hidden], at positions 0..tokens-1); ``mask`` [batch, n, tokens + n]: which context tokens
        and block tokens each block token reads (:func:`block_mask`)."""
        context = self.hidden_norm(self.fc(torch.cat(features, -1)))
        positions = torch.arange(context.shape[1], device=context.device)
        x = block_embeds
        for layer in self.layers:
            keys = layer.self_attn.keys(context, positions)
            x = layer(x, block_positions, keys, mask)
        return self.norm(x)


def init_weights(module: nn.Module, generator: torch.Generator, std: float = 0.02) -> None:
    """Normal(0, ``std``) matrices, the residual branches' output projections scaled by 1/sqrt(2 x the module's
    layers), norms 1; drawn from ``generator`` in parameter order (the same on every device)."""
    out = 1.0 / (2 * module.config["num_hidden_layers"]) ** 0.5
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                scale = std * (out if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0)
                p.copy_(torch.randn(p.shape, generator=generator) * scale)


def block_mask(anchors: torch.Tensor, block: int, context: int) -> torch.Tensor:
    """[batch, A * block, context + A * block]: the token at place ``j`` of anchor ``a``'s block (root at
    ``anchors[b, a]``) reads the context tokens before its root and every token of its own block."""
    batch, count = anchors.shape
    n = count * block
    which = torch.arange(n, device=anchors.device) // block  # the anchor of each block token
    root = anchors[:, :, None].expand(batch, count, block).reshape(batch, n)
    before = torch.arange(context, device=anchors.device)[None, None, :] < root[:, :, None]
    same = (which[:, None] == which[None, :]).expand(batch, n, n)
    return torch.cat([before, same], -1)


def draft_blocks(embed: nn.Embedding, ids: torch.Tensor, anchors: torch.Tensor, block: int, mask_id: int):
    """The embedded blocks ``[root, mask x (block - 1)]`` of ``anchors`` [batch, A] in ``ids`` [batch, tokens], and
    their positions, each [batch, A * block, ...]."""
    roots = ids.gather(1, anchors)  # [batch, A]
    tokens = torch.full((*anchors.shape, block), mask_id, dtype=ids.dtype, device=ids.device)
    tokens[..., 0] = roots
    positions = anchors[..., None] + torch.arange(block, device=ids.device)
    return embed(tokens.flatten(1)), positions.flatten(1)


def state_dict_bf16(module: nn.Module) -> Dict[str, torch.Tensor]:
    """The module's weights in bfloat16, on the CPU, contiguous (what ``model.safetensors`` holds)."""
    return {name: t.detach().to("cpu", torch.bfloat16).contiguous() for name, t in module.state_dict().items()}
