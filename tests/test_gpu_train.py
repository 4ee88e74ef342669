"""tools/gpu/train on the CPU: the training script end to end in its ``tiny`` preset (the code the H100/H200 runs
with the ``gpu`` preset), its record, its idempotence and determinism; the target's forward is transformers'
``LlamaForCausalLM``'s; and the committed CPU model (``tests/data/trained_tiny``) is what its record says.

The served side (SGLang loading both checkpoints, the draft drafting what :class:`models.DFlashDraft` computes) is
``tests/on_sglang/test_trained_tiny_serve.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "tools" / "gpu" / "train"
COMMITTED = ROOT / "tests" / "data" / "trained_tiny"

for module in ("torch", "tokenizers", "safetensors"):
    pytest.importorskip(module)
sys.path.insert(0, str(TRAIN))

import corpus  # noqa: E402
import models  # noqa: E402
import train  # noqa: E402


def _train(out: Path, *extra: str) -> subprocess.CompletedProcess:
    """train.py --preset tiny into ``out`` (a process of its own: it turns on torch's deterministic mode)."""
    return subprocess.run([sys.executable, str(TRAIN / "train.py"), "--preset", "tiny", "--target", str(out / "target"),
                           "--draft", str(out / "draft"), "--out", str(out / "record" / "train.json"), *extra],
                          capture_output=True, text=True, timeout=300, cwd=out)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    done = _train(out)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads((out / "record" / "train.json").read_text())


def test_the_record_says_what_was_trained_and_measured(trained):
    out, record = trained
    p = train.PRESETS["tiny"]
    assert record["rebuilt"] is True and record["preset"] == "tiny" and record["seed"] == train.SEED
    assert record["corpus"]["held_out"]["files"] > 0 and record["corpus"]["train"]["files"] > 0
    assert len(record["corpus"]["sha256"]) == 64 and record["corpus"]["python"] == sys.version.split()[0]
    assert record["tokenizer"]["vocab_size"] == p["vocab"]
    assert [step for step, _, _ in record["target"]["loss_curve"]] == list(range(1, p["steps"] + 1))
    assert record["target"]["held_out"]["perplexity"] > 1 and record["target"]["held_out"]["tokens"] > 0
    accept = record["draft"]["acceptance"]["all"]
    assert set(accept["tokens_per_step"]) == {"2", "4"} and all(1 <= v <= int(w) for w, v in accept["tokens_per_step"].items())
    assert sum(accept["accepted_histogram"]) == 3 * record["draft"]["acceptance"]["roots"]  # three contexts a window
    assert len(accept["conditional"]) == p["block"] - 1
    # every file hashed, as it is on disk; the prompts beside the record are the target's
    assert record["sha256"] == train.hashes(out / "target", out / "draft")
    assert (out / "record" / "prompts.json").read_bytes() == (out / "target" / "prompts.json").read_bytes()
    prompts = json.loads((out / "target" / "prompts.json").read_text())
    assert {k: len(v) for k, v in prompts["kinds"].items()} == {"completion": 2, "edit": 2}


def test_the_checkpoints_are_in_sglang_s_layout(trained):
    out, _ = trained
    from safetensors.torch import load_file

    target = json.loads((out / "target" / "config.json").read_text())
    draft = json.loads((out / "draft" / "config.json").read_text())
    assert target["architectures"] == ["LlamaForCausalLM"] and draft["architectures"] == ["DFlashDraftModel"]
    assert draft["dflash_config"] == {"block_size": 4, "target_layer_ids": [0], "mask_token_id": 1, "mask_token": corpus.MASK}
    assert draft["hidden_size"] == target["hidden_size"] and draft["num_target_layers"] == target["num_hidden_layers"]
    names = set(load_file(str(out / "draft" / "model.safetensors")))
    assert {"fc.weight", "hidden_norm.weight", "norm.weight", "layers.0.self_attn.q_norm.weight",
            "layers.0.self_attn.k_norm.weight", "layers.0.mlp.down_proj.weight"} <= names
    assert not any("embed" in n or "lm_head" in n for n in names)  # the target's embedding and head serve the draft
    weights = load_file(str(out / "target" / "model.safetensors"))
    assert {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"} <= set(weights)
    assert {str(t.dtype) for t in weights.values()} == {"torch.bfloat16"}


def test_a_second_call_trains_nothing_and_forced_training_writes_the_same_bytes(trained, tmp_path):
    out, record = trained
    again = _train(out)
    assert again.returncode == 0 and "nothing trained" in again.stdout
    assert json.loads((out / "record" / "train.json").read_text())["rebuilt"] is False
    other = _train(tmp_path, "--expect", str(out / "record" / "train.json"))
    assert other.returncode == 0, other.stderr[-3000:]
    rerun = json.loads((tmp_path / "record" / "train.json").read_text())
    assert rerun["sha256"] == record["sha256"] and all(rerun["matches_recorded"].values())
    assert [c[:2] for c in rerun["target"]["loss_curve"]] == [c[:2] for c in record["target"]["loss_curve"]]


def test_a_changed_checkpoint_is_trained_again(trained, tmp_path):
    out, _ = trained
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / "draft" / "model.safetensors").write_bytes(b"not the recorded draft")
    assert train.present(copy / "target", copy / "draft") is None
    assert train.present(out / "target", out / "draft") is not None


def test_the_target_is_transformers_llama(trained):
    """The target's forward in float32 equals ``LlamaForCausalLM``'s on its saved config and weights (what SGLang's
    Llama computes, up to its kernels' rounding), and the layer captured for the draft is transformers' hidden
    state after that layer."""
    out, _ = trained
    import torch
    from safetensors.torch import load_file

    pytest.importorskip("transformers")
    from sglang_spec_plugins.engine.cpu_harness import install_stand_ins

    install_stand_ins()  # transformers imports torchvision, whose CUDA operators a CPU torch lacks
    from transformers import AutoConfig, AutoModelForCausalLM

    config = json.loads((out / "target" / "config.json").read_text())
    mine = models.Llama(config)
    mine.load_state_dict({k: v.float() for k, v in load_file(str(out / "target" / "model.safetensors")).items()})
    theirs = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out / "target"), torch_dtype=torch.float32)
    theirs.load_state_dict(mine.state_dict())
    ids = torch.tensor([json.loads((out / "target" / "prompts.json").read_text())["kinds"]["edit"][0]])
    with torch.no_grad():
        hidden, captured = mine.eval()(ids, capture=[0])
        reference = theirs.eval()(ids, output_hidden_states=True)
    # float32 through the same operations in another order: a few ulps of values of order 1-10
    assert torch.allclose(mine.lm_head(hidden), reference.logits, atol=1e-4, rtol=1e-4)
    assert torch.allclose(captured[0], reference.hidden_states[1], atol=1e-5, rtol=1e-5)


def test_the_tokenizer_loads_with_auto_tokenizer(trained):
    out, _ = trained
    pytest.importorskip("transformers")
    from sglang_spec_plugins.engine.cpu_harness import install_stand_ins
    from tokenizers import Tokenizer

    install_stand_ins()
    from transformers import AutoTokenizer

    auto = AutoTokenizer.from_pretrained(out / "target")
    text = "def f(x):\n    return x + 1\n"
    assert auto(text)["input_ids"] == Tokenizer.from_file(str(out / "target" / "tokenizer.json")).encode(text).ids
    assert auto.eos_token_id == 0 and auto.mask_token_id == 1 and auto.decode(auto(text)["input_ids"]) == text


def test_the_split_depends_on_the_path_alone(tmp_path):
    """Held-out files are the same for every ``fraction`` (the CPU presets train on fewer files, never on held-out
    ones), and the corpus hash covers paths and bytes."""
    for i in range(60):
        (tmp_path / f"m{i}.py").write_text(f"x = {i}\n")
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "other.py").write_text("not the standard library\n")
    (tmp_path / "latin1.py").write_bytes(b"# \xe9\n")
    whole, part = corpus.stdlib_files(held_out_percent=20, root=tmp_path), corpus.stdlib_files(20, 0.3, root=tmp_path)
    assert whole.held_out == part.held_out and whole.held_out and set(part.train) < set(whole.train)
    assert whole.undecodable == ["latin1.py"] and not any("site-packages" in p for p in whole.train)
    (tmp_path / "m0.py").write_text("x = -1\n")
    assert corpus.stdlib_files(held_out_percent=20, root=tmp_path).sha256 != whole.sha256


def test_the_block_mask_is_the_dflash_worker_s_attention():
    """A block token reads the context before its root and its own block, nothing of another block."""
    import torch

    mask = models.block_mask(torch.tensor([[2, 5]]), block=3, context=8)[0]
    assert mask.shape == (6, 8 + 6)
    assert mask[:3, :8].tolist() == [[True, True] + [False] * 6] * 3
    assert mask[3:, :8].tolist() == [[True] * 5 + [False] * 3] * 3
    assert mask[:3, 8:].tolist() == [[True] * 3 + [False] * 3] * 3 and mask[3:, 8:].tolist() == [[False] * 3 + [True] * 3] * 3


def test_the_committed_cpu_model_is_its_record():
    """``tests/data/trained_tiny`` holds what ``train.py --preset cpu`` wrote (its command in the record's
    preset), every file with the hash the record gives, under 2 MB of weights."""
    record = json.loads((COMMITTED / "target" / "train.json").read_text())
    assert record["preset"] == "cpu" and record["settings"] == train.PRESETS["cpu"]
    assert record["sha256"] == train.hashes(COMMITTED / "target", COMMITTED / "draft")
    weights = sum((COMMITTED / d / "model.safetensors").stat().st_size for d in ("target", "draft"))
    assert weights < 2 * 1024 * 1024
