"""Train, from a fixed seed, a Llama target on the Python standard library and a DFlash draft for it; save both as
SGLang loads them and write what the training measured.

usage: python3 train.py --preset gpu|cpu|tiny --target DIR --draft DIR --out RECORD.json
                        [--device cuda|cpu] [--expect RECORDED.json] [--force]

* ``gpu``: the H100/H200 run (issue 46): a byte-level BPE of 4,096 tokens, a 6-layer Llama of hidden size 768
  (43 M parameters; 12 query heads over 3 key/value heads of 64, Llama-3's group of 4, so SGLang's flashinfer
  backend decodes it with the kernels it uses for Llama-3 and for the tiny Llama of the engine checks) trained
  for a fixed 1,500 steps of 64 x 512 tokens (49 M tokens, ~5 epochs of the train split), then a 2-layer DFlash
  draft, blocks of 16 (DFlash's default), for 2,000 steps of 32 windows x 32 blocks;
* ``cpu``: the small model the CPU tests serve through SGLang's scheduler (its checkpoints, 1.5 MB, are
  committed under ``tests/data/trained_tiny``, so no test trains it): 512 tokens, 3 layers of 128, a 1-layer
  draft, blocks of 4;
* ``tiny``: the same code in seconds (the test of this script).

Deterministic: every random draw comes from generators seeded by ``SEED`` (initial weights and batches drawn on
the CPU), fixed step counts, ``torch.use_deterministic_algorithms(True)`` with ``CUBLAS_WORKSPACE_CONFIG`` set
before CUDA starts (PyTorch then runs flash and memory-efficient attention's backward deterministically), so two
runs on the same kind of GPU, torch and Python write the same bytes (the record's ``sha256`` of each file).

Idempotent: where ``--target`` and ``--draft`` already hold checkpoints whose hashes are those of the
``train.json`` beside them, nothing is trained and that record is written to ``--out`` (``--force``: train
anyway). ``--expect``: a record committed from an earlier run; the record says whether each hash matches it.

The record (``--out``; also ``DIR/train.json`` of the target): the corpus (files, bytes, SHA-256, Python), the
tokenizer, the training loss every ``log_every`` steps, the target's held-out loss and perplexity, the draft's
acceptance on held-out windows (for roots after 1/8, 1/4 and 1/2 of a window's tokens: the draft's greedy block
against the target's own greedy continuation of the same context, so the accepted length is what a verify step of
the full block commits, and at each width W what verifying the first W would), a few greedy continuations,
timings, versions, and each file's SHA-256. ``prompts.json`` (the benchmark prompts, :func:`corpus.prompts`)
goes into the target folder and beside ``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
SEED = 46
PRESETS = {
    "gpu": dict(vocab=4096, hidden=768, layers=6, heads=12, kv_heads=3, head_dim=64, intermediate=2048, seq=512,
                batch=64, steps=1500, lr=1e-3, warmup=100, draft_layers=2, block=16, target_layer_ids=[1, 2, 4],
                draft_batch=32, anchors=32, draft_steps=2000, draft_lr=1e-3, log_every=50, fraction=1.0,
                eval_windows=1024, accept_windows=256, autocast=True, max_positions=2048, threads=None,
                prompts=dict(count=64, completion_tokens=192, edit_file_tokens=256, edit_restart_tokens=48)),
    "cpu": dict(vocab=512, hidden=128, layers=3, heads=4, kv_heads=2, head_dim=32, intermediate=256, seq=128,
                batch=8, steps=1200, lr=3e-3, warmup=30, draft_layers=1, block=4, target_layer_ids=[0, 1],
                draft_batch=8, anchors=16, draft_steps=800, draft_lr=3e-3, log_every=50, fraction=0.12,
                eval_windows=64, accept_windows=32, autocast=False, max_positions=512, threads=1,
                prompts=dict(count=3, completion_tokens=48, edit_file_tokens=64, edit_restart_tokens=16)),
    "tiny": dict(vocab=300, hidden=32, layers=2, heads=2, kv_heads=1, head_dim=16, intermediate=64, seq=64,
                 batch=4, steps=3, lr=3e-3, warmup=1, draft_layers=1, block=4, target_layer_ids=[0],
                 draft_batch=4, anchors=4, draft_steps=3, draft_lr=3e-3, log_every=1, fraction=0.01,
                 eval_windows=4, accept_windows=4, autocast=True, max_positions=256, threads=1,
                 prompts=dict(count=2, completion_tokens=24, edit_file_tokens=32, edit_restart_tokens=8)),
}
"""``threads``: torch's CPU threads (None: its default); one on the CPU presets, where two threads on a shared
2-core machine ran a step 10 times slower than one. The ``gpu`` step counts are fixed, not timed: at 100 TFLOP/s
(a conservative eighth of an H100's bf16 peak for a model this small, in eager PyTorch) the target's 1,500 steps
(~8.6 TFLOP each: 6 x 40 M x 32,768 tokens, and attention) take ~130 s and the draft's 2,000 (~3 TFLOP each)
~60 s; the record has the throughput reached.
The ``cpu`` preset took 417 s on this project's shared 2-core machine (1,200 and 800 steps; its weights are
committed, so the tests never train it)."""
DECAY = 7.0 / 16
"""The draft's loss weight at block place ``j`` is ``exp(-(j - 1) / (DECAY * block))`` (DFlash's decay, gamma 7 at
blocks of 16): an early place decides more accepted tokens than a late one."""
ACCEPT_WIDTHS = (2, 4, 8, 16)


def deterministic() -> None:
    """What makes the run repeat bit for bit on one kind of machine (module doc); before CUDA starts."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def target_config(p: dict) -> dict:
    """The target's ``config.json`` (``LlamaForCausalLM``, bf16, untied head, ``<|endoftext|>`` as BOS and EOS)."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": p["hidden"],
            "intermediate_size": p["intermediate"], "num_hidden_layers": p["layers"], "num_attention_heads": p["heads"],
            "num_key_value_heads": p["kv_heads"], "head_dim": p["head_dim"], "vocab_size": p["vocab"],
            "max_position_embeddings": p["max_positions"], "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
            "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "bfloat16"}


def draft_checkpoints():
    """``sglang_spec_plugins.testing.draft_checkpoint`` (``make_model.checkpoints``: loaded from its file)."""
    sys.path.insert(0, str(HERE.parent / "engine"))
    import make_model

    return make_model.checkpoints()


class Schedule:
    """Linear warm-up to ``lr``, then cosine decay to a tenth of it at ``steps``."""

    def __init__(self, lr: float, warmup: int, steps: int):
        self.lr, self.warmup, self.steps = lr, warmup, steps

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        done = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done)))


def optimizer(module, lr: float):
    """AdamW (betas 0.9/0.95, weight decay 0.1 on matrices only)."""
    import torch

    params = [p for p in module.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


class Descent:
    """One optimiser step per ``step(i, loss)`` (gradients clipped to norm 1), and the loss curve: the mean loss
    over every ``every`` steps (and at the last of ``steps``), with the seconds since the start, printed as
    ``LABEL step N: loss L (S s)``."""

    def __init__(self, label: str, opt, params, every: int, steps: int, device):
        import torch

        self.label, self.opt, self.params, self.every, self.steps = label, opt, list(params), every, steps
        self.curve, self.running, self.started = [], torch.zeros((), device=device), time.time()

    def step(self, i: int, loss) -> None:
        import torch

        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.running += loss.detach()
        if (i + 1) % self.every == 0 or i + 1 == self.steps:
            span = (i % self.every) + 1
            self.curve.append([i + 1, round(self.running.item() / span, 4), round(time.time() - self.started, 1)])
            self.running.zero_()
            print(f"{self.label} step {self.curve[-1][0]}: loss {self.curve[-1][1]} ({self.curve[-1][2]} s)", flush=True)


def windows(stream, starts, length: int):
    """``stream[s : s + length]`` for each start, as int64 [len(starts), length]."""
    import torch

    return stream[starts[:, None] + torch.arange(length)].long()


class Run:
    def __init__(self, preset: str, device: str):
        import torch

        self.p, self.device = PRESETS[preset], torch.device(device)
        if self.p["threads"]:
            torch.set_num_threads(self.p["threads"])
        self.autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.p["autocast"])
        self.timings: Dict[str, float] = {}

    def timed(self, name: str, started: float) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.timings[name] = round(time.time() - started, 2)

    # -- data --------------------------------------------------------------------------------------------------
    def data(self) -> dict:
        import corpus

        started = time.time()
        self.corpus = corpus.stdlib_files(fraction=self.p["fraction"])
        self.timed("corpus_s", started)
        started = time.time()
        self.tokenizer = corpus.train_tokenizer(self.corpus.train.values(), self.p["vocab"])
        self.timed("tokenizer_s", started)
        started = time.time()
        self.train_stream = corpus.token_stream(self.tokenizer, list(self.corpus.train.values()))
        self.held_stream = corpus.token_stream(self.tokenizer, list(self.corpus.held_out.values()))
        self.prompts = corpus.prompts(self.tokenizer, self.corpus.held_out, **self.p["prompts"])
        self.timed("encode_s", started)
        train_bytes = sum(len(t.encode()) for t in self.corpus.train.values())
        return {"vocab_size": self.tokenizer.get_vocab_size(), "kind": "byte-level BPE (tokenizers)",
                "special_tokens": {"<|endoftext|>": 0, "<|mask|>": 1}, "train_tokens": len(self.train_stream),
                "held_out_tokens": len(self.held_stream),
                "bytes_per_token": round(train_bytes / max(1, len(self.train_stream)), 3)}

    def batch(self, gen, count: int):
        import torch

        starts = torch.randint(0, len(self.train_stream) - self.p["seq"] - 1, (count,), generator=gen)
        return windows(self.train_stream, starts, self.p["seq"] + 1).to(self.device)

    def held_out_windows(self, limit: int):
        import torch

        seq = self.p["seq"]
        count = min(limit, (len(self.held_stream) - 1) // seq)
        if count < 1:
            raise ValueError(f"held-out split too small: {len(self.held_stream)} tokens for windows of {seq}")
        return windows(self.held_stream, torch.arange(count) * seq, seq + 1)

    # -- the target ----------------------------------------------------------------------------------------------
    def train_target(self) -> dict:
        import torch
        import torch.nn.functional as F
        from models import Llama, init_weights

        p = self.p
        self.config = target_config(p)
        gen = torch.Generator().manual_seed(SEED)
        model = Llama(self.config)
        init_weights(model, gen)
        model.to(self.device).train()
        opt, schedule = optimizer(model, p["lr"]), Schedule(p["lr"], p["warmup"], p["steps"])
        started = time.time()
        descent = Descent("target", opt, model.parameters(), p["log_every"], p["steps"], self.device)
        for step in range(p["steps"]):
            for group in opt.param_groups:
                group["lr"] = schedule(step)
            x = self.batch(gen, p["batch"])
            with self.autocast:
                hidden, _ = model(x[:, :-1])
                logits = model.lm_head(hidden)
            descent.step(step, F.cross_entropy(logits.float().flatten(0, 1), x[:, 1:].flatten()))
        self.timed("target_train_s", started)
        self.target = model.eval().requires_grad_(False)
        tokens = p["steps"] * p["batch"] * p["seq"]
        matrices = sum(q.numel() for n, q in model.named_parameters() if "embed_tokens" not in n and q.dim() >= 2)
        seconds = self.timings["target_train_s"]
        return {"config": self.config, "parameters": sum(q.numel() for q in model.parameters()), "steps": p["steps"],
                "batch": p["batch"], "seq": p["seq"], "lr": p["lr"], "warmup": p["warmup"], "tokens_seen": tokens,
                "epochs": round(tokens / len(self.train_stream), 2), "loss_curve": descent.curve,
                "tokens_per_s": round(tokens / seconds), "tflop_per_s": round(6 * matrices * tokens / seconds / 1e12, 1),
                "held_out": self.held_out_loss()}

    @staticmethod
    def _ce(logits, labels):
        import torch.nn.functional as F

        return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="sum")

    def held_out_loss(self) -> dict:
        import torch

        started = time.time()
        total, count = 0.0, 0
        data = self.held_out_windows(self.p["eval_windows"])
        with torch.no_grad():
            for chunk in data.split(self.p["batch"]):
                chunk = chunk.to(self.device)
                with self.autocast:
                    hidden, _ = self.target(chunk[:, :-1])
                    logits = self.target.lm_head(hidden)
                total += self._ce(logits, chunk[:, 1:]).item()
                count += chunk[:, 1:].numel()
        self.timed("target_eval_s", started)
        return {"tokens": count, "windows": len(data), "loss": round(total / count, 4),
                "perplexity": round(math.exp(total / count), 3)}

    def greedy(self, ids, steps: int):
        """``steps`` greedy tokens after each row of ``ids`` [batch, tokens] (the target, no cache)."""
        import torch

        out = []
        with torch.no_grad():
            for _ in range(steps):
                with self.autocast:
                    hidden, _ = self.target(ids)
                    token = self.target.lm_head(hidden[:, -1]).float().argmax(-1, keepdim=True)
                out.append(token)
                ids = torch.cat([ids, token], 1)
        return torch.cat(out, 1)

    # -- the draft -----------------------------------------------------------------------------------------------
    def draft_config(self) -> dict:
        p = self.p
        return {**target_config(p), "architectures": ["DFlashDraftModel"], "num_hidden_layers": p["draft_layers"],
                "dflash_config": {"block_size": p["block"], "target_layer_ids": p["target_layer_ids"],
                                  "mask_token_id": 1}}

    def draft_hidden(self, draft, ids, anchors, features):
        from models import block_mask, draft_blocks

        embeds, positions = draft_blocks(self.target.model.embed_tokens, ids, anchors, self.p["block"], 1)
        mask = block_mask(anchors, self.p["block"], features[0].shape[1])
        return draft(embeds, positions, features, mask)

    def train_draft(self) -> dict:
        import torch
        from models import DFlashDraft, init_weights

        p, block = self.p, self.p["block"]
        gen = torch.Generator().manual_seed(SEED + 1)
        draft = DFlashDraft(self.draft_config())
        init_weights(draft, gen)
        draft.to(self.device).train()
        opt, schedule = optimizer(draft, p["draft_lr"]), Schedule(p["draft_lr"], p["warmup"], p["draft_steps"])
        weights = torch.exp(-torch.arange(block - 1, dtype=torch.float32) / (DECAY * block)).to(self.device)
        head = self.target.lm_head.weight
        started = time.time()
        descent = Descent("draft", opt, draft.parameters(), p["log_every"], p["draft_steps"], self.device)
        for step in range(p["draft_steps"]):
            for group in opt.param_groups:
                group["lr"] = schedule(step)
            x = self.batch(gen, p["draft_batch"])[:, :-1]
            # distinct roots with a context before them and a whole block after: 1 .. seq - block
            anchors = torch.rand(p["draft_batch"], p["seq"] - block, generator=gen).argsort(-1)[:, :p["anchors"]]
            anchors = (anchors.sort(-1).values + 1).to(self.device)
            with torch.no_grad(), self.autocast:
                hidden, features = self.target(x, capture=p["target_layer_ids"])
                # the target's distribution of the token at root + j, j = 1 .. block - 1 (its logits at root + j - 1)
                where = (anchors[..., None] + torch.arange(block - 1, device=self.device)).flatten(1)
                at = hidden.gather(1, where[..., None].expand(-1, -1, hidden.shape[-1]))
                wanted = torch.softmax(self.target.lm_head(at).float(), -1)
            with self.autocast:
                out = self.draft_hidden(draft, x, anchors, features).unflatten(1, (p["anchors"], block))[:, :, 1:]
                logits = torch.nn.functional.linear(out, head)
            logp = torch.log_softmax(logits.float(), -1).flatten(1, 2)
            per_place = -(wanted * logp).sum(-1).unflatten(1, (p["anchors"], block - 1)).mean((0, 1))
            descent.step(step, (per_place * weights).sum() / weights.sum())
        self.timed("draft_train_s", started)
        self.draft = draft.eval().requires_grad_(False)
        return {"config": self.draft.config, "parameters": sum(q.numel() for q in draft.parameters()),
                "steps": p["draft_steps"], "batch": p["draft_batch"], "anchors_per_window": p["anchors"],
                "lr": p["draft_lr"], "loss": "cross-entropy against the target's next-token distribution at each "
                                             "block place (teacher-forced on the corpus), places weighted "
                                             f"exp(-(j-1)/{DECAY * block:g})",
                "loss_curve": descent.curve, "acceptance": self.acceptance()}

    def acceptance(self) -> dict:
        """The draft's greedy block against the target's greedy continuation, on held-out windows (module doc)."""
        import torch

        started = time.time()
        p, block = self.p, self.p["block"]
        data = self.held_out_windows(p["accept_windows"])
        found, accepted_all, matched_all = {}, [], []
        for context in (p["seq"] // 8, p["seq"] // 4, p["seq"] // 2):
            accepted, matched = [], []
            for chunk in data.split(p["batch"]):
                ids = chunk[:, :context + 1].to(self.device)
                anchors = torch.full((len(ids), 1), context, device=self.device)
                with torch.no_grad(), self.autocast:
                    _, features = self.target(ids[:, :context], capture=p["target_layer_ids"])
                    out = self.draft_hidden(self.draft, ids, anchors, features)[:, 1:]
                    drafts = self.target.lm_head(out).float().argmax(-1)
                truth = self.greedy(ids, block - 1)
                same = (drafts == truth).cpu()  # counted on the CPU: cumulative ops have no deterministic CUDA kernel
                run = same.int().cumprod(-1)
                accepted.append(run.sum(-1))
                matched.append(run)
            accepted, matched = torch.cat(accepted), torch.cat(matched)
            found[str(context)] = self._accept_summary(accepted, matched)
            accepted_all.append(accepted)
            matched_all.append(matched)
        self.timed("draft_eval_s", started)
        return {"roots": len(data), "by_context_tokens": found,
                "all": self._accept_summary(torch.cat(accepted_all), torch.cat(matched_all))}

    def _accept_summary(self, accepted, matched) -> dict:
        block = self.p["block"]
        reached = [len(accepted)] + matched.sum(0).tolist()  # how many got past place j - 1
        return {"tokens_per_step": {str(w): round(1 + accepted.clamp(max=w - 1).float().mean().item(), 3)
                                    for w in ACCEPT_WIDTHS if w <= block},
                "conditional": [round(reached[j + 1] / reached[j], 3) if reached[j] else None for j in range(block - 1)],
                "accepted_histogram": [int((accepted == k).sum()) for k in range(block)]}

    def samples(self, count: int = 2, tokens: int = 48) -> List[dict]:
        """The target's greedy continuations of the first completion prompts, as text."""
        import torch

        out = []
        for ids in self.prompts["kinds"]["completion"][:count]:
            cont = self.greedy(torch.tensor([ids], device=self.device), tokens)[0].tolist()
            out.append({"prompt_end": self.tokenizer.decode(ids[-24:]), "greedy": self.tokenizer.decode(cont)})
        return out

    # -- saving --------------------------------------------------------------------------------------------------
    def save(self, target_dir: Path, draft_dir: Path) -> dict:
        import corpus
        from models import state_dict_bf16
        from safetensors.torch import save_file

        for folder in (target_dir, draft_dir):
            shutil.rmtree(folder, ignore_errors=True)
        target_dir.mkdir(parents=True)
        (target_dir / "config.json").write_text(json.dumps(self.config, indent=1) + "\n")
        save_file(state_dict_bf16(self.target), str(target_dir / "model.safetensors"))
        corpus.save_tokenizer(self.tokenizer, target_dir, self.p["max_positions"])
        (target_dir / "prompts.json").write_text(json.dumps(self.prompts) + "\n")
        config = self.draft.config
        draft_checkpoints().dflash_draft(
            draft_dir, self.config, block_size=self.p["block"], mask_token_id=1,
            target_layer_ids=self.p["target_layer_ids"],
            num_layers=self.p["draft_layers"], weights=state_dict_bf16(self.draft), mask_token=corpus.MASK,
            rope_theta=config["rope_theta"])
        return hashes(target_dir, draft_dir)


def hashes(target_dir: Path, draft_dir: Path) -> dict:
    """The SHA-256 of every file the checkpoints are made of."""
    return {f"target/{p.name}": sha256(p) for p in sorted(target_dir.iterdir()) if p.name != "train.json"} | \
           {f"draft/{p.name}": sha256(p) for p in sorted(draft_dir.iterdir())}


def present(target_dir: Path, draft_dir: Path) -> Optional[dict]:
    """The record beside checkpoints whose files are the ones it hashed (None otherwise)."""
    record_path = target_dir / "train.json"
    if not (record_path.is_file() and draft_dir.is_dir()):
        return None
    record = json.loads(record_path.read_text())
    return record if record.get("sha256") == hashes(target_dir, draft_dir) else None


def versions(device: str) -> dict:
    import safetensors
    import tokenizers
    import torch

    found = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
             "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__, "device": device,
             "threads": torch.get_num_threads()}
    if device.startswith("cuda"):
        found["gpu"] = torch.cuda.get_device_name(0)
    return found


def main(argv: Optional[List[str]] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=PRESETS, required=True)
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default=None, help="default: cuda where there is one, else cpu")
    parser.add_argument("--expect", type=Path, help="a recorded train.json whose hashes these should equal")
    parser.add_argument("--force", action="store_true", help="train even where the checkpoints are present")
    args = parser.parse_args(argv)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before anything starts CUDA
    sys.path.insert(0, str(HERE))
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    began = time.time()
    record = None if args.force else present(args.target, args.draft)
    if record is not None:
        print(f"present: {args.target} and {args.draft} hold the recorded checkpoints; nothing trained", flush=True)
        record["rebuilt"] = False
    else:
        deterministic()
        run = Run(args.preset, device)
        record = {"preset": args.preset, "settings": PRESETS[args.preset], "seed": SEED, "versions": versions(device)}
        record["tokenizer"] = run.data()
        record["corpus"] = run.corpus.record()
        record["target"] = run.train_target()
        record["draft"] = run.train_draft()
        record["samples"] = run.samples()
        record["prompts"] = {k: v for k, v in run.prompts.items() if k != "kinds"} | \
                            {"counts": {k: len(v) for k, v in run.prompts["kinds"].items()},
                             "tokens": {k: [len(ids) for ids in v] for k, v in run.prompts["kinds"].items()}}
        started = time.time()
        record["sha256"] = run.save(args.target, args.draft)
        run.timed("save_s", started)
        record["timings"] = run.timings | {"total_s": round(time.time() - began, 1)}
        record["rebuilt"] = True
        (args.target / "train.json").write_text(json.dumps(record, indent=1) + "\n")
    if args.expect is not None and args.expect.is_file():
        expected = json.loads(args.expect.read_text()).get("sha256", {})
        record["matches_recorded"] = {name: expected.get(name) == digest for name, digest in record["sha256"].items()}
        print(f"against {args.expect}: {record['matches_recorded']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    shutil.copyfile(args.target / "prompts.json", args.out.parent / "prompts.json")
    summary = {"held_out": record["target"]["held_out"],
               "tokens_per_step": record["draft"]["acceptance"]["all"]["tokens_per_step"],
               "timings": record["timings"], "rebuilt": record["rebuilt"]}
    print("TRAIN", json.dumps(summary), flush=True)
    return record


if __name__ == "__main__":
    main()
