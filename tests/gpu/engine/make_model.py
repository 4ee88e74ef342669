"""Write a small random-weight Llama (bf16, no tokenizer) for the engine checks; no download.

usage: python3 make_model.py OUT_DIR [--shape tiny|llama3-8b]

The LM head is drawn with a larger spread than the default initialiser, so
that the next-token logits have clear winners: with near-flat logits, two
kernels that sum in a different order (a decode step and a verify step) can
pick different argmaxes on a near-tie, and greedy outputs would differ for a
reason that has nothing to do with speculation.
"""

import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "tiny": dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
                 num_key_value_heads=2, head_dim=64),
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=128),
}
LM_HEAD_STD = 0.5

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--shape", choices=SHAPES, default="tiny")
    args = parser.parse_args()
    started = time.time()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=1,
                         eos_token_id=2, tie_word_embeddings=False, **SHAPES[args.shape])
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
        torch.nn.init.normal_(model.lm_head.weight, std=LM_HEAD_STD)
    model.save_pretrained(args.out)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"{args.shape} llama: {params:.1f} M parameters -> {args.out} ({time.time() - started:.1f} s)")
