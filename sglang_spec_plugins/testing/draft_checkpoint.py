"""Tiny checkpoints for testing a drafter with a draft model: a DFlash-layout draft and a Llama target.

* :func:`dflash_draft` writes the ``config.json`` of a draft in SGLang's DFlash
  layout (``architectures: ["DFlashDraftModel"]``, ``dflash_config``), sized for
  a target config, optionally with weights (``model.safetensors``); without
  weights, serve it with ``--speculative-draft-load-format dummy``.
* :func:`llama_target` writes a Llama target (config and seeded random weights).
* :func:`accepting_draft` writes a draft that guesses a given token at every
  mask position: a target whose greedy output keeps returning to that token
  accepts its drafts often.

Imports torch (and ``safetensors`` to write weights); not SGLang.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence, Tuple

DRAFT_ARCHITECTURE = "DFlashDraftModel"


def dflash_draft(folder: Path, target: Mapping, *, block_size: int, mask_token_id: int,
                 target_layer_ids: Sequence[int], num_layers: int = 1, weights: Optional[Mapping] = None,
                 mask_token: Optional[str] = None, **overrides) -> Path:
    """Write a DFlash-layout draft for ``target`` (its config.json as a dict) in
    ``folder``: the target's hidden size, heads, head dim and vocabulary,
    ``num_layers`` layers, and ``dflash_config`` with ``block_size``,
    ``target_layer_ids``, ``mask_token_id`` and, where given, ``mask_token`` (the
    token's text in the target's tokenizer, which SGLang checks against the id
    when it loads a tokenizer); ``weights`` (name -> tensor) go to
    ``model.safetensors``. ``overrides`` replace config keys."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    heads = target["num_attention_heads"]
    config = {
        "architectures": [DRAFT_ARCHITECTURE], "model_type": target.get("model_type", "llama"),
        "hidden_size": target["hidden_size"], "intermediate_size": target["intermediate_size"],
        "num_attention_heads": heads, "num_key_value_heads": target.get("num_key_value_heads", heads),
        "head_dim": target.get("head_dim", target["hidden_size"] // heads), "num_hidden_layers": num_layers,
        "vocab_size": target["vocab_size"], "max_position_embeddings": target["max_position_embeddings"],
        "rms_norm_eps": target.get("rms_norm_eps", 1e-6), "hidden_act": "silu", "torch_dtype": target.get("torch_dtype", "bfloat16"),
        "num_target_layers": target["num_hidden_layers"], "block_size": block_size,
        "dflash_config": {"block_size": block_size, "target_layer_ids": list(target_layer_ids),
                          "mask_token_id": mask_token_id},
    }
    if mask_token is not None:
        config["dflash_config"]["mask_token"] = mask_token
    config.update(overrides)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    if weights is not None:
        _save(folder, weights)
    return folder


def llama_target(folder: Path, config: Mapping, *, seed: int = 0, scale: float = 0.05, shared: float = 0.0,
                 favour: Optional[Tuple[int, float]] = None) -> Path:
    """Write ``config`` and seeded random weights (normal, ``scale``; norms 1) of a
    Llama with that config in ``folder``. ``shared`` is added to the first entry
    of every token's embedding (a direction all embeddings share), and
    ``favour = (token, pull)`` adds ``pull`` to that entry of the LM head's row
    for ``token``: contexts whose hidden state keeps the shared direction then
    choose ``token``, so greedy output keeps returning to it."""
    import torch

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim", hidden // heads)

    def rand(*shape):
        return torch.randn(*shape, generator=gen) * scale

    embed = rand(vocab, hidden)
    embed[:, 0] += shared
    head = rand(vocab, hidden)
    if favour is not None:
        head[favour[0], 0] += favour[1]
    weights = {"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(hidden), "lm_head.weight": head}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        weights.update({
            p + "self_attn.q_proj.weight": rand(heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": rand(kv * head_dim, hidden),
            p + "self_attn.v_proj.weight": rand(kv * head_dim, hidden),
            p + "self_attn.o_proj.weight": rand(hidden, heads * head_dim),
            p + "mlp.gate_proj.weight": rand(inter, hidden), p + "mlp.up_proj.weight": rand(inter, hidden),
            p + "mlp.down_proj.weight": rand(hidden, inter),
            p + "input_layernorm.weight": torch.ones(hidden), p + "post_attention_layernorm.weight": torch.ones(hidden),
        })
    (folder / "config.json").write_text(json.dumps(dict(config), indent=1))
    _save(folder, weights)
    return folder


def read_weights(folder: Path) -> Dict[str, "object"]:
    """The tensors of ``folder/model.safetensors``."""
    from safetensors.torch import load_file

    return load_file(str(Path(folder) / "model.safetensors"))


def accepting_draft(folder: Path, target: Mapping, target_weights: Mapping, token: int, *, block_size: int,
                    target_layer_ids: Sequence[int], num_layers: int = 1, seed: int = 0, scale: float = 1e-3,
                    eps: float = 1e-6) -> Path:
    """Write a draft (:func:`dflash_draft`) that guesses ``token`` at every mask
    position: its layers add only ``scale``-small random attention and MLP
    outputs to the embedding they are given (the attention still reads the
    draft KV the worker writes), and its final norm's weights turn the mask
    token's RMS-normalised embedding into the vector the target LM head scores
    closest to one-hot ``token`` (least squares); ValueError if the head then
    does not choose ``token``. The mask token is the one whose normalised
    embedding has the largest smallest entry (the division stays tame). A
    target whose greedy output keeps returning to ``token`` accepts these
    drafts often."""
    import torch

    embed = target_weights["model.embed_tokens.weight"].float()
    head = target_weights["lm_head.weight"].float()
    normed = embed * torch.rsqrt(embed.pow(2).mean(-1, keepdim=True) + eps)
    mask = int(normed.abs().min(dim=-1).values.argmax())
    want = torch.zeros(head.shape[0])
    want[token] = 1.0
    direction = torch.linalg.pinv(head) @ want
    if int((head @ direction).argmax()) != token:
        raise ValueError(f"the target's LM head scores no hidden vector highest for token {token}")
    final = direction * (head[token].norm() / direction.norm()) / normed[mask]
    gen = torch.Generator().manual_seed(seed)
    hidden, inter = target["hidden_size"], target["intermediate_size"]
    heads = target["num_attention_heads"]
    kv = target.get("num_key_value_heads", heads)
    head_dim = target.get("head_dim", hidden // heads)

    def rand(*shape, s=0.05):
        return torch.randn(*shape, generator=gen) * s

    weights = {"fc.weight": rand(hidden, len(target_layer_ids) * hidden), "hidden_norm.weight": torch.ones(hidden),
               "norm.weight": final}
    for i in range(num_layers):
        p = f"layers.{i}."
        weights.update({
            p + "self_attn.q_proj.weight": rand(heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": rand(kv * head_dim, hidden),
            p + "self_attn.v_proj.weight": rand(kv * head_dim, hidden),
            p + "self_attn.o_proj.weight": rand(hidden, heads * head_dim, s=scale),
            p + "self_attn.q_norm.weight": torch.ones(head_dim), p + "self_attn.k_norm.weight": torch.ones(head_dim),
            p + "mlp.gate_proj.weight": rand(inter, hidden), p + "mlp.up_proj.weight": rand(inter, hidden),
            p + "mlp.down_proj.weight": rand(hidden, inter, s=scale),
            p + "input_layernorm.weight": torch.ones(hidden), p + "post_attention_layernorm.weight": torch.ones(hidden),
        })
    return dflash_draft(folder, target, block_size=block_size, mask_token_id=mask, target_layer_ids=target_layer_ids,
                        num_layers=num_layers, weights=weights)


def _save(folder: Path, weights: Mapping) -> None:
    from safetensors.torch import save_file

    save_file({name: tensor.contiguous() for name, tensor in weights.items()}, str(folder / "model.safetensors"))
