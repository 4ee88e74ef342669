"""Write the models the engine checks serve; no download.

usage: python3 make_model.py OUT_DIR [--shape tiny|llama3-8b] [--config-only]
       python3 make_model.py OUT_DIR --favoured TOKEN          (the tiny shape)
       python3 make_model.py OUT_DIR --draft-for TARGET_DIR [--block N] [--layers N] [--accepting TOKEN]

A small random-weight Llama (bf16, no tokenizer); ``--config-only`` writes just
its ``config.json``, which SGLang serves with ``--load-format dummy`` (the
Llama-3-8B-shaped speed runs). The LM head is drawn with a larger spread than
the default initialiser, so that the next-token logits have clear winners:
with near-flat logits, two kernels that sum in a different order (a decode
step and a verify step) can pick different argmaxes on a near-tie, and greedy
outputs would differ for a reason that has nothing to do with speculation.

``--favoured TOKEN``: a tiny Llama whose greedy output keeps returning to
``TOKEN`` (``sglang_spec_plugins.testing.draft_checkpoint.llama_target``,
every embedding sharing a direction the LM head's row for the token follows).
``--draft-for``: a draft in SGLang's DFlash layout for that target
(``testing.draft_checkpoint``): one layer, blocks of ``--block``, the target's
second layer captured; config only (served with
``--speculative-draft-load-format dummy``), or with ``--accepting TOKEN``
weights that guess ``TOKEN`` at every mask position (the favoured target
accepts them often).
"""

import argparse
import json
import time
from pathlib import Path

import torch

SHAPES = {
    "tiny": dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
                 num_key_value_heads=2, head_dim=64),
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=128),
}
LM_HEAD_STD = 0.5
FAVOUR_SCALE, FAVOUR_SHARED, FAVOUR_PULL = 0.02, 0.6, 1.5
"""The favoured target's weight spread, shared embedding direction and its token's pull along it. The CPU
tests' accepting target (hidden size 64, tests/on_sglang/test_draft_model_serve.py) uses 0.05, 0.4, 1.0; at
the tiny shape's hidden size 512 those let the random layers outgrow the shared direction and the greedy
output never returned to the token (the H200 run of 2026-12-02 committed 1.00 token per verify step). With
these, a bf16 forward of this target on the CPU returned to the token in 48% of 96 greedy tokens (float32: 85%),
and the accepting draft still guessed it under perturbations of its hidden state up to 0.03 per entry."""


def checkpoints():
    """``sglang_spec_plugins.testing.draft_checkpoint``, loaded from its file: the package
    ``testing`` is the pytest plugin (it imports pytest, which the H200 image need not have)."""
    import importlib.util

    import sglang_spec_plugins

    path = Path(sglang_spec_plugins.__file__).parent / "testing" / "draft_checkpoint.py"
    spec = importlib.util.spec_from_file_location("draft_checkpoint", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def llama_config(shape: str):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=1,
                       eos_token_id=2, tie_word_embeddings=False, torch_dtype="bfloat16", **SHAPES[shape])


def favoured_target(out: Path, config: dict, token: int) -> Path:
    """The ``--favoured`` target's weights (seed 0) and ``config`` in ``out``; its weights depend only on the
    tiny shape's sizes in ``config`` (``reference_margins.py`` writes them again from those alone)."""
    return checkpoints().llama_target(out, config, seed=0, scale=FAVOUR_SCALE, shared=FAVOUR_SHARED,
                                      favour=(token, FAVOUR_PULL))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--shape", choices=SHAPES, default="tiny")
    parser.add_argument("--config-only", action="store_true", help="config.json only (served with dummy weights)")
    parser.add_argument("--favoured", type=int, metavar="TOKEN", help="a tiny target that keeps returning to TOKEN")
    parser.add_argument("--draft-for", metavar="TARGET_DIR", help="a DFlash-layout draft for this target")
    parser.add_argument("--block", type=int, default=4)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--accepting", type=int, metavar="TOKEN", help="draft weights that guess TOKEN")
    args = parser.parse_args()
    started = time.time()
    out = Path(args.out)
    if args.draft_for:
        found = checkpoints()
        accepting_draft, dflash_draft, read_weights = found.accepting_draft, found.dflash_draft, found.read_weights
        target = json.loads((Path(args.draft_for) / "config.json").read_text())
        layer_ids = [min(1, target["num_hidden_layers"] - 2)]
        if args.accepting is None:
            dflash_draft(out, target, block_size=args.block, mask_token_id=target["vocab_size"] - 1,
                         target_layer_ids=layer_ids, num_layers=args.layers)
        else:
            accepting_draft(out, target, read_weights(args.draft_for), args.accepting, block_size=args.block,
                            target_layer_ids=layer_ids, num_layers=args.layers)
        print(f"DFlash draft ({args.layers} layer(s), block {args.block}, accepting={args.accepting}) for "
              f"{args.draft_for} -> {out} ({time.time() - started:.1f} s)")
    elif args.favoured is not None:
        config = dict(llama_config("tiny").to_dict(), architectures=["LlamaForCausalLM"])  # SGLang reads it
        favoured_target(out, config, args.favoured)
        print(f"tiny llama favouring token {args.favoured} -> {out} ({time.time() - started:.1f} s)")
    elif args.config_only:
        out.mkdir(parents=True, exist_ok=True)
        config = llama_config(args.shape)
        config.architectures = ["LlamaForCausalLM"]
        config.save_pretrained(out)
        print(f"{args.shape} llama config (dummy weights) -> {out}")
    else:
        torch.manual_seed(0)
        config = llama_config(args.shape)
        from transformers import LlamaForCausalLM

        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = LlamaForCausalLM(config).to(torch.bfloat16)
            torch.nn.init.normal_(model.lm_head.weight, std=LM_HEAD_STD)
        model.save_pretrained(args.out)
        params = sum(p.numel() for p in model.parameters()) / 1e6
        print(f"{args.shape} llama: {params:.1f} M parameters -> {args.out} ({time.time() - started:.1f} s)")
