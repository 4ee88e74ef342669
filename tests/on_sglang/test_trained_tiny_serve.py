"""PROMPT_LOOKUP and DFLASH_BLOCK on a model trained on real text, through SGLang's real scheduler on a CPU.

``tests/data/trained_tiny`` is ``tools/gpu/train/train.py --preset cpu``: a 3-layer Llama trained on the Python
standard library (byte-level BPE of 512 tokens) and a 1-layer DFlash draft for it (blocks of 4), committed with
the record of their training. Unlike the random and hand-made checkpoints of the other scheduler tests, its
greedy continuations of held-out code repeat what came before some of the time, not always: drafts are accepted
at rates that vary from step to step, as on real text. Served here, as ``scheduler_serve`` serves (float32,
triton attention interpreted), on two held-out prompts (the beginning of a file to continue, and an edit: a
file, a comment asking for it again, its first lines): plain decoding, PROMPT_LOOKUP and DFLASH_BLOCK at the
full block (W = B = 4).

* Both drafters are token-identical to plain decoding, and commit more than one token per verify step and
  fewer than the width (real, partial acceptance).
* The draft SGLang runs drafts what ``tools/gpu/train/models.py``'s ``DFlashDraft`` computes (the code that
  trained it): at every verify step, the chain SGLang verified (the root, then the draft's block) is the one that
  model predicts from the request's prompt and committed tokens, place by place, except where its two best tokens
  are within :data:`NEAR_TIE` (float32 kernels summing in another order may pick either), and each request takes
  SGLang's number of verify steps. So training and serving compute the same thing: the context's draft KV from
  the captured target layers, the root left out of it, the block's positions, the mask token, the norms. (Checked
  by hand: shifting the block's positions by one, or putting the layers' input norm before the context's keys,
  fails it.)
"""

import json
import sys
from pathlib import Path

import pytest

from sglang_spec_plugins.engine.worker_contract import contract
from sglang_spec_plugins.testing.scheduler_serve import serve_in_a_process

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "trained_tiny"
NDT = 4
"""``--speculative-num-draft-tokens``: the draft's block, and PROMPT_LOOKUP's width."""
NEW_TOKENS = 16
NEAR_TIE = 1e-3
"""Logits (of order 1-10 here) closer than this are a tie that float32 kernels may break either way."""

# slow: the main run (0.5.23) runs it; test_draft_model_serve and test_scheduler_serve guard the same serving on
# every release with hand-made checkpoints
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    contract().non_overlap_schema != "v2-sync",
    reason=f"draft-model plugins need SGLang 0.5.14+ (the V2 speculative schema); SGLang {contract().release} runs "
           f"synchronous plugin workers on {contract().non_overlap_schema!r}")]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``{None | "PROMPT_LOOKUP" | "DFLASH_BLOCK": result}``, and the prompts served (one of each kind)."""
    tmp = tmp_path_factory.mktemp("trained")
    kinds = json.loads((DATA / "target" / "prompts.json").read_text())["kinds"]
    prompts = {"kinds": {kind: found[:1] for kind, found in kinds.items()}}
    (tmp / "prompts.json").write_text(json.dumps(prompts))
    (tmp / "plugins.toml").write_text('[plugins]\nenable = ["prompt_lookup", "dflash_block"]\n')
    found = {}
    for algorithm in (None, "PROMPT_LOOKUP", "DFLASH_BLOCK"):
        found[algorithm] = serve_in_a_process(algorithm, tmp / "plugins.toml", ndt=NDT, max_new_tokens=NEW_TOKENS,
                                              model=DATA / "target", draft=DATA / "draft" if algorithm else None,
                                              prompts=tmp / "prompts.json")
        assert found[algorithm]["served"], found[algorithm]
    return found, {f"{kind}-0": ids[0] for kind, ids in prompts["kinds"].items()}


def _outputs(result):
    return {rid: r["output_ids"] for rid, r in result["requests"].items()}


def _per_step(result):
    requests = result["requests"].values()
    return sum(r["completion_tokens"] - 1 for r in requests) / sum(r["spec_verify_ct"] for r in requests)


@pytest.mark.parametrize("algorithm", ["PROMPT_LOOKUP", "DFLASH_BLOCK"])
def test_greedy_outputs_are_plain_decoding_s_and_acceptance_is_partial(served, algorithm):
    results, _ = served
    assert _outputs(results[algorithm]) == _outputs(results[None])
    per_step = _per_step(results[algorithm])
    steps = {rid: (r["completion_tokens"] - 1) / r["spec_verify_ct"] for rid, r in results[algorithm]["requests"].items()}
    print(f"{algorithm} on the trained tiny model, SGLang {contract().release}: {per_step:.2f} tokens per verify step "
          f"at width {NDT} ({steps})")
    assert 1 < per_step < NDT, steps
    assert all(width == NDT for _, width in results[algorithm]["verify_steps"])


def test_the_served_draft_drafts_what_the_training_code_computes(served):
    """Every block the served draft drafted, step by step: ``DFlashDraft`` from the committed checkpoints, given
    the request's context so far (prompt and committed tokens) and its root, drafts the chain SGLang verified at
    that step (place by place, but for near-ties), and committing what those drafts would commit takes each
    request through exactly SGLang's number of verify steps."""
    import torch
    from safetensors.torch import load_file

    sys.path.insert(0, str(ROOT / "tools" / "gpu" / "train"))
    from models import DFlashDraft, Llama, block_mask, draft_blocks

    results, prompts = served
    target_config = json.loads((DATA / "target" / "config.json").read_text())
    draft_config = json.loads((DATA / "draft" / "config.json").read_text())
    target, draft = Llama(target_config).eval(), DFlashDraft(draft_config).eval()
    for module, folder in ((target, "target"), (draft, "draft")):  # bf16 weights, served in float32 as here
        module.load_state_dict({k: v.float() for k, v in load_file(str(DATA / folder / "model.safetensors")).items()})
    layers, mask_id = draft_config["dflash_config"]["target_layer_ids"], draft_config["dflash_config"]["mask_token_id"]
    served_chains = [tuple(step[i:i + NDT]) for step in results["DFLASH_BLOCK"]["verify_tokens"]
                     for i in range(0, len(step), NDT)]
    requests = results["DFLASH_BLOCK"]["requests"]
    exact = places = 0
    for rid, prompt in prompts.items():
        out, k, steps = requests[rid]["output_ids"], 0, 0
        while k < len(out) - 1:  # the root is out[k]: the last token committed
            ids = torch.tensor([prompt + out[:k + 1]])
            context = ids.shape[1] - 1
            with torch.no_grad():
                _, features = target(ids[:, :-1], capture=layers)
                embeds, positions = draft_blocks(target.model.embed_tokens, ids, torch.tensor([[context]]), NDT, mask_id)
                hidden = draft(embeds, positions, features, block_mask(torch.tensor([[context]]), NDT, context))
                logits = target.lm_head(hidden[0, 1:])
            mine = logits.argmax(-1).tolist()

            def near(chain):
                return all(want == got or float(logits[j, want] - logits[j, got]) < NEAR_TIE
                           for j, (want, got) in enumerate(zip(mine, chain[1:])))

            # a chain from this root that SGLang verified (another request's may start at the same token)
            found = [c for c in served_chains if c[0] == out[k] and near(c)]
            assert found, (rid, k, mine, [c for c in served_chains if c[0] == out[k]], logits.topk(2).values.tolist())
            exact += max(sum(a == b for a, b in zip(mine, c[1:])) for c in found)
            places += NDT - 1
            accepted = next((j for j, (d, t) in enumerate(zip(mine, out[k + 1:])) if d != t), min(NDT - 1, len(out) - k - 1))
            k += accepted + 1
            steps += 1
        assert steps == requests[rid]["spec_verify_ct"], rid
    assert exact >= places - 1, (exact, places)  # a near-tie at most once, or the check checks little
