"""How close the model itself is to a tie where a speculative engine left plain decoding, on a CPU.

usage: python3 reference_margins.py RESULTS_DIR LABEL [--favoured TOKEN]

For every request where engine ``LABEL``'s greedy output differs from its plain engine's
(``compare.divergences``), a plain PyTorch forward of the target (written here again: the favoured tiny target
of ``make_model.py --favoured TOKEN``, seed 0) over the prompt and the common prefix gives the two most likely
next tokens and their log-probability gap, in float32 and in bf16. A gap of a few hundredths says the
divergence is a near-tie of the model, which two kernels summing in a different order may round either way;
a wide gap would point at the drafter. Not SGLang's kernels, so not the H200's own margins (``margins.py``,
which needs the GPU); one JSON line per divergence. Which of two near-tied tokens comes first depends on the CPU
(``CPU_TOLERANCE``): compare them as a set within it, never their order.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import compare  # noqa: E402
import make_model  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CPU_TOLERANCE = {"float32": 0.001, "bfloat16": 4 * 2.0 ** -7, "float16": 4 * 2.0 ** -10}
"""How far a token's log-probability below the top may move from one CPU or thread count to another, per dtype.
The favoured target's top logits lie in [1, 2), where a bf16 step is 2**-7 and a float16 step 2**-10: the
tolerance is 4 steps, one more than the most measured (torch 2.13, an AVX-512 EPYC, every SBD divergence of
results/sbd and results/triton_0.5.17: 1, 2 and 4 threads gave the same bits; the kernels of other CPUs, forced
with ATEN_CPU_CAPABILITY=avx2|default, ONEDNN_MAX_CPU_ISA=AVX2|SSE41 and MKL_CBWR=COMPATIBLE|AVX|AVX2, moved a
near-top token's distance below the top by up to 3 bf16 steps, 0.0234, and 2 float16 steps, 0.0020, and
reordered near-tied tokens in both). float32 moved by nothing: 0.001 covers the 4-decimal rounding of committed
gaps and another BLAS's order of summation (float32's own step here is 2**-23)."""


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return normed.to(x.dtype) * weight


def _rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Llama's rotary embedding (halves rotated) of ``x`` [tokens, heads, head_dim] at positions 0..tokens-1."""
    half = x.shape[-1] // 2
    freqs = torch.arange(x.shape[0]).float()[:, None] / theta ** (torch.arange(half).float() / half)
    cos, sin = freqs.cos()[:, None], freqs.sin()[:, None]
    a, b = x[..., :half].float(), x[..., half:].float()
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).to(x.dtype)


def next_token_logprobs(weights: Dict[str, torch.Tensor], config: dict, ids: List[int], dtype) -> torch.Tensor:
    """The log-probabilities of the token after ``ids`` (causal attention, softmax in float32)."""
    w = {name: tensor.to(dtype) for name, tensor in weights.items()}
    heads, kv, head_dim = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    eps, theta, tokens = config["rms_norm_eps"], config.get("rope_theta", 10000.0), len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    causal = torch.triu(torch.ones(tokens, tokens, dtype=torch.bool), 1)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms(x, w[p + "input_layernorm.weight"], eps)
        q = _rope((h @ w[p + "self_attn.q_proj.weight"].T).view(tokens, heads, head_dim), theta)
        k = _rope((h @ w[p + "self_attn.k_proj.weight"].T).view(tokens, kv, head_dim), theta)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(tokens, kv, head_dim)
        k, v = k.repeat_interleave(heads // kv, 1).float(), v.repeat_interleave(heads // kv, 1).float()
        scores = torch.einsum("thd,shd->hts", q.float(), k) / head_dim ** 0.5
        attended = torch.einsum("hts,shd->thd", scores.masked_fill(causal, float("-inf")).softmax(-1), v)
        x = x + attended.to(dtype).reshape(tokens, heads * head_dim) @ w[p + "self_attn.o_proj.weight"].T
        h = _rms(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    logits = _rms(x[-1:], w["model.norm.weight"], eps) @ w["lm_head.weight"].T
    return logits[0].float().log_softmax(-1)


def logprobs(results: Path, label: str, token: int) -> List[Tuple[dict, Dict[str, torch.Tensor]]]:
    """Per divergence of ``label`` (``compare.divergences``): the divergence, and per dtype the favoured
    target's log-probabilities over the vocabulary for the token at its place."""
    config = dict(vocab_size=32000, rms_norm_eps=1e-5, max_position_embeddings=4096, **make_model.SHAPES["tiny"])
    with tempfile.TemporaryDirectory() as folder:
        make_model.favoured_target(Path(folder), config, token)
        weights = make_model.checkpoints().read_weights(folder)
    return [(d, {name: next_token_logprobs(weights, config, d["input_ids"], dtype) for name, dtype in DTYPES.items()})
            for d in compare.divergences(compare.load(results)) if d["label"] == label]


def below_top(values: torch.Tensor, tokens) -> Dict[int, float]:
    """Each of ``tokens``' log-probability below the most likely token's (0 for that token itself)."""
    return {token: float(values.max() - values[token]) for token in tokens}


def margins(results: Path, label: str, token: int) -> List[dict]:
    """One row per divergence of ``label``: its place, both engines' tokens, and per dtype the model's top two
    and their gap."""
    rows = []
    for d, found in logprobs(results, label, token):
        row = {k: d[k] for k in ("batch", "prompts", "request", "position", "speculative", "plain")}
        for name, values in found.items():
            top = values.topk(2)
            row[name] = {"top2": top.indices.tolist(), "gap": round(float(top.values[0] - top.values[1]), 4)}
        rows.append(row)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("label")
    parser.add_argument("--favoured", type=int, default=29)
    args = parser.parse_args()
    for found in margins(args.results, args.label, args.favoured):
        print(json.dumps(found))
