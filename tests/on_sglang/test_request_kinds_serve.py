"""Every request kind SGLang's own drafters serve, through plugin drafters, through SGLang's real scheduler.

Each run is one process of ``sglang_spec_plugins.testing.scheduler_serve``: the
installed release's real ``Scheduler`` and its own event loop (the overlap
loop where overlap is on, as a server runs by default) on a tiny Llama with a
byte-level tokenizer (grammars need one), requests sent as the tokenizer
manager sends them. The reference is plain decoding without overlap: SGLang's
plain decoding with overlap applies a request's penalties one token late (see
``test_sglang_s_own_overlap_decoding_penalises_one_token_late``).

* greedy, penalised (frequency, presence, repetition), ``min_new_tokens`` with
  ``logit_bias``, regex and JSON-schema requests: token-identical to plain
  decoding, for every example drafter, with overlap on and off;
* ``return_logprob`` requests (with top logprobs and token-id logprobs): the
  same tokens, each logprob within :data:`LOGPROB_TOLERANCE` of plain decoding's;
* sampled requests: the joint distribution of the first 3 generated tokens
  against the exact distribution plain sampling draws them from, read off
  plain decoding's own logprobs (chi-square, false-positive rate
  :data:`FALSE_POSITIVE_RATE`; the draws are seeded, so the verdict is the same
  on every run), with a drafter whose drafts are accepted often; a worker that
  accepts drafts greedily for sampled requests fails it.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import sys

import pytest

from sglang_spec_plugins.engine.containment import SYNC_CHECK_ENV
from sglang_spec_plugins.engine.probe import method_source
from sglang_spec_plugins.engine.worker_contract import contract
from sglang_spec_plugins.testing.distribution import goodness_of_fit
from sglang_spec_plugins.testing.draft_checkpoint import accepting_draft, llama_target, read_weights
from sglang_spec_plugins.testing.scheduler_serve import overlap_on_a_cpu, request, serve_in_a_process
from sglang_spec_plugins.testing.scheduler_start import TINY_LLAMA, write_byte_tokenizer

pytestmark = pytest.mark.skipif(
    not contract().overlap_schema,
    reason=f"the worker bases drive SGLang's V2 schema (0.5.14+); SGLang {contract().release} has none")

OVERLAP = overlap_on_a_cpu()
"""Whether this release's overlap scheduler runs a speculative worker on a CPU (0.5.23): where not, the overlap
cases are skipped and the sampling test runs without overlap."""
FAVOURED = 29
"""The token the target keeps returning to, which the accepting drafts guess."""
BLOCK = 4
LOGPROB_TOLERANCE = 1e-4
"""Float32 logits of the same model through the same kernels; only the batch's other rows differ (measured
differences: 0 here), so a logprob may differ in its last bits, never by more."""
FALSE_POSITIVE_RATE = 1e-3
SAMPLES = 2000
MUTANT_SAMPLES = 400
"""The greedy-acceptance mutant's requests: fewer than :data:`SAMPLES`, since a chi-square statistic against a
fixed wrong distribution grows in proportion to the samples (the mutant scored 2,003.6 at 2,000 against the
critical 69.4, and 785.2 at 400 against 36.3), so a mutant that fails at 400 fails at 2,000 too; 220 s less of CI."""
JSON_SCHEMA = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
                          "required": ["a", "b"], "additionalProperties": False})
REGEX = "(ab|ba)+c[0-9]{3}"

GRAMMARS_ON_A_CPU = '"cpu"' in (method_source("sglang.srt.constrained.xgrammar_backend",
                                                "XGrammarGrammar.apply_vocab_mask") or "")
"""Whether the release's grammar object masks logits on a CPU (0.5.23; before, SGLang's own plain decoding
refuses a grammar request on a CPU: "Unsupported device: cpu"), where the grammar requests are served."""

TOKEN_IDS_IN_MIXED_BATCHES = "new_empty" in (method_source("sglang.srt.layers.logprob_processor",
                                                           "get_token_ids_logprobs_raw") or "")
"""Whether the release serves token-id logprobs in a batch where another request asks for none (0.5.23; before,
its result processor calls ``.tolist()`` on the plain list it gave that request, so plain decoding itself fails
such a batch), where the logprob request asks for them."""

SYNC_CHECKED = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **{SYNC_CHECK_ENV: "1"})
"""Every serving process runs the plugins' steps under :func:`~sglang_spec_plugins.engine.containment.sync_check`:
a blocking copy to the device in a step (one that would make the host wait for the GPU) stops the scheduler."""
REQUESTS = [
    request("repetitive", [5, 17, 33, 48, 61, 5, 17, 33, 48, 61, 5, 17], 16),
    request("mixed", [9, 200, 14, 77, 130, 41, 9, 200, 14, 250], 16),
    request("penalised", [101, 7, 222, 45, 190, 66, 13, 241], 16, frequency_penalty=0.5, presence_penalty=0.3,
            repetition_penalty=1.2),
    request("min_new_tokens", [3, 4, 5, 6], 12, min_new_tokens=8, logit_bias={"7": 3.0, str(FAVOURED): -2.0}),
    request("logprob", [5, 17, 33, 48, 61, 5, 17, 33], 12, return_logprob=True, top_logprobs_num=3,
            token_ids_logprob=[5, FAVOURED] if TOKEN_IDS_IN_MIXED_BATCHES else None),
    request("sampled", [9, 200, 14, 77, 130, 41], 16, temperature=0.8, top_p=0.9),
] + ([request("regex", [65, 66, 67], 12, regex=REGEX), request("json", [123, 34], 24, json_schema=JSON_SCHEMA)]
     if GRAMMARS_ON_A_CPU else [])
EXACT = ("repetitive", "mixed", "penalised", "min_new_tokens", "logprob") + (("regex", "json") if GRAMMARS_ON_A_CPU else ())


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """``(target, draft)``: a tiny Llama that keeps returning to FAVOURED, with a tokenizer, and a
    DFlash draft (blocks of BLOCK) that guesses it."""
    root = tmp_path_factory.mktemp("kinds")
    target = llama_target(root / "target", TINY_LLAMA, seed=0, shared=0.4, favour=(FAVOURED, 1.0))
    write_byte_tokenizer(target)
    draft = accepting_draft(root / "draft", TINY_LLAMA, read_weights(target), FAVOURED, block_size=BLOCK,
                            target_layer_ids=[0])
    return target, draft


CONFIGS = {
    "PROMPT_LOOKUP": ('[plugins]\nenable = ["prompt_lookup"]\n'
                      '[algorithms.PROMPT_LOOKUP]\nwidths_by_batch_size = {1 = 4, 4 = [2, 4]}\n'
                      'widths_by_acceptance = {interval_steps = 2, margin = 0.0}\n'),
    "SBD": '[plugins]\nenable = ["sbd"]\n[algorithms.SBD]\nwidths_by_batch_size = {1 = [2, 3, 4]}\n',
    "CONTROLLED_ACCEPTANCE": ('[plugins]\nenable = ["controlled_acceptance"]\n[algorithms.CONTROLLED_ACCEPTANCE]\n'
                              'continuations = "{record}"\nwidths_by_batch_size = {{1 = [2, 4]}}\n'
                              'width_cycle = [4, 2]\n'),
    "DFLASH_BLOCK": '[plugins]\nenable = ["dflash_block"]\n',
    "DFLASH_BLOCK_W2": '[plugins]\nenable = ["dflash_block"]\n[algorithms.DFLASH_BLOCK]\nverify_width = 2\n',
}


AT_NDT = {
    "PROMPT_LOOKUP": '[plugins]\nenable = ["prompt_lookup"]\n',
    "SBD": '[plugins]\nenable = ["sbd"]\n',
    "CONTROLLED_ACCEPTANCE": ('[plugins]\nenable = ["controlled_acceptance"]\n[algorithms.CONTROLLED_ACCEPTANCE]\n'
                              'continuations = "{record}"\n'),
}
"""The same drafters at one width, ndt: what runs where the loader refuses, by design, the release's triton
backend at widths below ndt (up to 0.5.16: it lays a verify out at ndt)."""


def _serve(tmp_path, models, name, overlap, requests=REQUESTS, **options):
    target, draft = models
    algorithm = None if name is None else name.replace("_W2", "")
    record = tmp_path / "continuations.json"  # no prompt recorded: CONTROLLED_ACCEPTANCE drafts by prompt lookup
    record.write_text("{}")
    for configs in (CONFIGS, AT_NDT):
        if name is not None and name not in configs:
            break
        config = tmp_path / f"plugins-{name}-{overlap}.toml"
        config.write_text(configs.get(name, "[plugins]\nenable = []\n").replace("{record}", str(record))
                          .replace("{{", "{").replace("}}", "}"))
        result = serve_in_a_process(algorithm, config, ndt=BLOCK, model=target,
                                    draft=draft if algorithm == "DFLASH_BLOCK" else None, requests=requests,
                                    overlap=overlap, tokenizer=True, env=SYNC_CHECKED, **options)
        error = result.get("error") or ""
        if result["served"] or "--attention-backend triton" not in error or "is refused" not in error:
            break
    if not result["served"] and "--attention-backend triton" in error and "is refused" in error:
        pytest.skip(f"the loader refuses, by design, SGLang {contract().release}'s triton backend below ndt: "
                    f"{error.splitlines()[0]}")
    assert result["served"], result.get("error") or result
    return result


@pytest.fixture(scope="module")
def plain(models, tmp_path_factory):
    return _serve(tmp_path_factory.mktemp("plain"), models, None, overlap=False)


@pytest.mark.parametrize("name, overlap", [
    ("PROMPT_LOOKUP", True), ("PROMPT_LOOKUP", False), ("DFLASH_BLOCK", True), ("DFLASH_BLOCK", False),
    ("DFLASH_BLOCK_W2", True), ("SBD", True), ("CONTROLLED_ACCEPTANCE", True)])
def test_every_request_kind_is_served_as_plain_decoding_serves_it(plain, models, tmp_path, name, overlap):
    if overlap and not OVERLAP:
        pytest.skip(f"SGLang {contract().release}'s overlap scheduler drives no speculative worker on a CPU "
                    "(record_stream of a CPU tensor); its overlap is checked on a GPU (tools/gpu/engine)")
    served = _serve(tmp_path, models, name, overlap)
    got, want = served["requests"], plain["requests"]
    for rid in EXACT:
        assert got[rid]["output_ids"] == want[rid]["output_ids"], rid
    logprobs = [(a[0], b[0]) for a, b in zip(got["logprob"]["logprobs"], want["logprob"]["logprobs"])]
    assert len(logprobs) == 12 and all(abs(a - b) <= LOGPROB_TOLERANCE for a, b in logprobs), logprobs
    for kind in ("top_logprobs", "token_ids_logprobs") if TOKEN_IDS_IN_MIXED_BATCHES else ("top_logprobs",):
        for mine, theirs in zip(got["logprob"][kind], want["logprob"][kind]):
            assert [t for _, t in mine] == [t for _, t in theirs], kind
            assert all(abs(a[0] - b[0]) <= LOGPROB_TOLERANCE for a, b in zip(mine, theirs)), kind
    if GRAMMARS_ON_A_CPU:
        text = bytes(got["regex"]["output_ids"]).decode("latin-1")
        assert re.fullmatch(REGEX, text) or _regex_prefix(text), text
    assert len(got["sampled"]["output_ids"]) == 16 and got["sampled"]["finish"]["type"] == "length"
    assert not served["log"], served["log"]  # nothing faulted
    steps = sum(r["spec_verify_ct"] for r in got.values())
    assert steps < sum(r["completion_tokens"] for r in got.values()), "no draft was ever accepted"


def _regex_prefix(text):
    """Whether ``text`` can still grow into a match of REGEX: ``(ab|ba)`` pairs, then maybe ``c`` and digits."""
    return re.fullmatch(r"((ab|ba)*(a|b)?|(ab|ba)+c[0-9]{0,3})", text) is not None


def test_sglang_s_own_overlap_decoding_penalises_one_token_late(plain, models, tmp_path):
    """Why the reference is plain decoding without overlap: with overlap SGLang's scheduler feeds a request's
    penalizer its last output token before the step in flight has produced the newest one (at the first
    decode step, the prompt's last token), so a penalised request decodes other tokens than without overlap.
    If this fails, SGLang fixed it: compare with plain overlap decoding too."""
    if not OVERLAP:
        pytest.skip(f"SGLang {contract().release}'s overlap scheduler drives no speculative worker on a CPU")
    overlapped = _serve(tmp_path, models, None, overlap=True)["requests"]
    assert overlapped["penalised"]["output_ids"] != plain["requests"]["penalised"]["output_ids"]
    for rid in ("repetitive", "mixed", "logprob") + (("regex", "json") if GRAMMARS_ON_A_CPU else ()):
        assert overlapped[rid]["output_ids"] == plain["requests"][rid]["output_ids"], rid


SMALL = dict(TINY_LLAMA, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=1,
             num_key_value_heads=1)
"""A one-layer, one-head Llama: hundreds of requests through the interpreted kernels in seconds."""
PROMPT = [FAVOURED, 7, 90, FAVOURED, 7]
TOP_K = 4


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("small")
    target = llama_target(root / "target", SMALL, seed=3, scale=0.15, shared=1.0, favour=(FAVOURED, 1.2))
    write_byte_tokenizer(target)
    return target


def _exact_joint(small, tmp_path):
    """The distribution plain sampling (temperature 1, top-k TOP_K) draws the first 3 tokens from: the
    product of each position's top-k distribution, read off plain decoding's logprobs for every prefix."""
    def top(prefixes):
        asked = [request(f"p{i}", PROMPT + list(prefix), 1, return_logprob=True, top_logprobs_num=TOP_K)
                 for i, prefix in enumerate(prefixes)]
        result = _serve(tmp_path, (small, None), None, overlap=False, requests=asked)["requests"]
        tables = {}
        for i, prefix in enumerate(prefixes):
            pairs = result[f"p{i}"]["top_logprobs"][0]
            total = sum(math.exp(v) for v, _ in pairs)
            tables[tuple(prefix)] = {t: math.exp(v) / total for v, t in pairs}
        return tables

    first = top([()])
    second = top([(a,) for a in first[()]])
    third = top([(a, b) for a in first[()] for b in second[(a,)]])
    return {(a, b, c): pa * pb * pc for a, pa in first[()].items() for b, pb in second[(a,)].items()
            for c, pc in third[(a, b)].items()}


def _sampled(small, tmp_path, worker, samples=SAMPLES):
    config = tmp_path / f"plugins-{worker}.toml"
    config.write_text(f'[plugins]\nenable = ["prompt_lookup"]\n[algorithms.PROMPT_LOOKUP]\nfavoured = {FAVOURED}\n')
    asked = [request(f"s{i}", PROMPT, 3, temperature=1.0, top_k=TOP_K) for i in range(samples)]
    result = serve_in_a_process("PROMPT_LOOKUP", config, ndt=BLOCK, model=small, requests=asked, overlap=OVERLAP,
                                tokenizer=True, worker=f"drafters:{worker}", seed=11,
                                server_args={"disable_radix_cache": False, "max_running_requests": samples})
    assert result["served"], result.get("error")
    counts = {}
    for got in result["requests"].values():
        key = tuple(got["output_ids"])
        counts[key] = counts.get(key, 0) + 1
    accepted = sum(r["spec_verify_ct"] == 1 for r in result["requests"].values())  # both tokens after the prefill's
    return counts, accepted  # in one verify: a draft accepted


@pytest.fixture(scope="module")
def exact(small, tmp_path_factory):
    return _exact_joint(small, tmp_path_factory.mktemp("exact"))


def test_sampled_requests_are_distributed_as_plain_sampling(small, exact, tmp_path):
    counts, accepted = _sampled(small, tmp_path, "Favoured")
    assert accepted > SAMPLES // 4, f"{accepted} of {SAMPLES}: too few drafts accepted for acceptance to matter"
    verdict = goodness_of_fit(counts, exact, FALSE_POSITIVE_RATE)
    print("served:", verdict)
    assert verdict.consistent, verdict


@pytest.mark.slow  # guarded on every release by test_chain_sampling.py::test_greedy_acceptance_of_sampled_requests_fails_the_test
def test_greedy_acceptance_of_sampled_requests_fails_the_same_test(small, exact, tmp_path):
    """The test above can fail: a worker that accepts drafts greedily for sampled requests fails it, already
    with :data:`MUTANT_SAMPLES` requests."""
    mutated, _ = _sampled(small, tmp_path, "GreedyAcceptance", MUTANT_SAMPLES)
    wrong = goodness_of_fit(mutated, exact, FALSE_POSITIVE_RATE)
    print("greedy acceptance:", wrong)
    assert not wrong.consistent, wrong
