"""Speculative sampling of chains (engine/chain_sampling.py): the committed tokens are distributed as plain sampling's.

A toy target with known distributions: a first-order Markov chain over a
small vocabulary (the distribution of the token after ``t`` is row ``t`` of a
fixed transition matrix, through :func:`target_probs` with top-k/top-p/min-p).
Many requests decode in one batch, step after step, until each has committed
3 tokens; the joint distribution of those 3 tokens is tested against the exact
product of the target's distributions (:mod:`sglang_spec_plugins.testing.distribution`,
false-positive rate 1e-4; the seeds are fixed, so the verdicts are the same on
every run). A rule that accepts drafts greedily for sampled requests must fail it.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from sglang_spec_plugins.engine import chain_sampling  # noqa: E402
from sglang_spec_plugins.engine.chain_sampling import (accept_greedy, point_mass, speculative_accept,  # noqa: E402
                                                        target_probs)
from sglang_spec_plugins.testing.distribution import goodness_of_fit  # noqa: E402

pytestmark = pytest.mark.sglang

VOCAB, ROOT, TOKENS = 7, 0, 3
FALSE_POSITIVE_RATE = 1e-4


def _model(seed=5):
    """Transition logits ``(VOCAB, VOCAB)``, peaked enough that drafts are often accepted."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(VOCAB, VOCAB, generator=generator) * 2.0


def _filtered(logits, top_k, top_p, min_p, temperature):
    n = logits.shape[0]
    return target_probs(logits, torch.full((n, 1), temperature), torch.full((n,), top_k), torch.full((n,), top_p),
                        torch.full((n,), min_p))


def _exact_joint(logits, **sampling):
    table = _filtered(logits, **sampling)
    return {seq: float(table[ROOT, seq[0]] * table[seq[0], seq[1]] * table[seq[1], seq[2]])
            for seq in itertools.product(range(VOCAB), repeat=TOKENS)}


def _decode(logits, width, drafter, accept=speculative_accept, requests=40000, seed=0, **sampling):
    """Each request's first TOKENS committed tokens, decoding chains of ``width`` tokens."""
    generator = torch.Generator().manual_seed(seed)
    table = _filtered(logits, **sampling)
    committed = [[] for _ in range(requests)]
    last = torch.full((requests,), ROOT, dtype=torch.int64)
    active = torch.arange(requests)
    while active.numel():
        drafts, draft_probs = drafter(last[active], width - 1, generator)
        chain = torch.cat([last[active].unsqueeze(1), drafts], dim=1)
        probs = table[chain]  # (bs, width, vocab): the distribution after each chain token
        greedy_next = torch.argmax(logits[chain], dim=-1)
        rows, lens = accept(chain, probs, greedy_next, draft_probs, generator)
        for request, row, count in zip(active.tolist(), rows.tolist(), lens.tolist()):
            committed[request].extend(row[:count])
        last[active] = rows[torch.arange(active.numel()), lens.long() - 1]
        active = torch.tensor([r for r in active.tolist() if len(committed[r]) < TOKENS], dtype=torch.int64)
    counts = {}
    for tokens in committed:
        key = tuple(tokens[:TOKENS])
        counts[key] = counts.get(key, 0) + 1
    return counts


def _greedy_guesses(logits):
    """A deterministic drafter: the target's argmax chain from the root (often right, never always)."""
    def drafter(last, count, generator):
        out, token = [], last
        for _ in range(count):
            token = torch.argmax(logits[token], dim=-1)
            out.append(token)
        return torch.stack(out, dim=1) if out else last[:, :0], None
    return drafter


def _sampling_drafter(logits):
    """A drafter that samples its drafts from its own proposal q (a flattened target) and hands q."""
    proposal = torch.softmax(logits / 3.0, dim=-1)

    def drafter(last, count, generator):
        tokens, probs, token = [], [], last
        for _ in range(count):
            q = proposal[token]
            token = torch.multinomial(q, 1, generator=generator).squeeze(1)
            tokens.append(token)
            probs.append(q)
        return torch.stack(tokens, dim=1), torch.stack(probs, dim=1)
    return drafter


SAMPLINGS = {
    "temperature": dict(top_k=1 << 30, top_p=1.0, min_p=0.0, temperature=0.8),
    "top_k_top_p_min_p": dict(top_k=4, top_p=0.9, min_p=0.05, temperature=1.1),
}


@pytest.mark.parametrize("sampling", sorted(SAMPLINGS))
@pytest.mark.parametrize("width", [2, 4])
def test_deterministic_drafts_commit_plain_sampling_s_distribution(sampling, width):
    logits = _model()
    counts = _decode(logits, width, _greedy_guesses(logits), **SAMPLINGS[sampling])
    verdict = goodness_of_fit(counts, _exact_joint(logits, **SAMPLINGS[sampling]), FALSE_POSITIVE_RATE)
    assert verdict.consistent, verdict


def test_drafts_drawn_from_a_proposal_commit_plain_sampling_s_distribution():
    logits = _model()
    sampling = SAMPLINGS["top_k_top_p_min_p"]
    counts = _decode(logits, 4, _sampling_drafter(logits), **sampling)
    verdict = goodness_of_fit(counts, _exact_joint(logits, **sampling), FALSE_POSITIVE_RATE)
    assert verdict.consistent, verdict


def _accepting_greedily(chain, probs, greedy_next, draft_probs=None, generator=None):
    """The mutation: sampled requests accept a draft iff it is the target's argmax (greedy acceptance),
    the token after the accepted ones still drawn from the target's distribution."""
    bs, width = chain.shape
    taken = (chain[:, 1:] == greedy_next[:, :-1]).int().cumprod(dim=1).sum(dim=1)
    drawn = chain_sampling.draw(probs[torch.arange(bs), taken], generator)
    following = torch.nn.functional.pad(chain[:, 1:], (0, 1))
    rows = torch.where(torch.arange(width).view(1, -1) < taken.unsqueeze(1), following, greedy_next)
    return rows.scatter(1, taken.unsqueeze(1), drawn.unsqueeze(1)), (taken + 1).int()


def test_greedy_acceptance_of_sampled_requests_fails_the_test():
    logits = _model()
    sampling = SAMPLINGS["temperature"]
    counts = _decode(logits, 4, _greedy_guesses(logits), accept=_accepting_greedily, **sampling)
    verdict = goodness_of_fit(counts, _exact_joint(logits, **sampling), FALSE_POSITIVE_RATE)
    assert not verdict.consistent, verdict


def test_a_rule_that_never_draws_from_the_residual_fails_the_test():
    """Accepting with the right probability but drawing the next token from p (not p without the rejected draft)."""
    logits = _model()
    sampling = SAMPLINGS["temperature"]

    def no_residual(chain, probs, greedy_next, draft_probs=None, generator=None):
        rows, lens = speculative_accept(chain, probs, greedy_next, None, generator)
        at = probs[torch.arange(chain.shape[0]), lens.long() - 1]
        return rows.scatter(1, (lens.long() - 1).unsqueeze(1), chain_sampling.draw(at, generator).unsqueeze(1)), lens

    counts = _decode(logits, 4, _greedy_guesses(logits), accept=no_residual, **sampling)
    verdict = goodness_of_fit(counts, _exact_joint(logits, **sampling), FALSE_POSITIVE_RATE)
    assert not verdict.consistent, verdict


def test_greedy_rows_commit_what_greedy_verification_commits():
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(64, 5, 50, generator=generator)
    chain = torch.randint(0, 50, (64, 5), generator=generator)
    greedy_next = torch.argmax(logits, dim=-1)
    chain[:32, 1:3] = greedy_next[:32, :2]  # half of them start with accepted drafts
    rows, lens = speculative_accept(chain, point_mass(logits.view(-1, 50)).view(64, 5, 50), greedy_next, None, generator)
    expected_lens = accept_greedy(chain, greedy_next)
    assert torch.equal(lens, expected_lens)
    assert torch.equal(rows, greedy_next)  # accepted drafts equal the argmax; the argmax follows them


def test_target_probs_keeps_what_sglang_s_sampler_keeps():
    """Top-k, top-p on the mass before each token, min-p against the most likely: worked by hand on one row."""
    logits = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.06, 0.04]]))
    one = torch.ones(1, 1)
    kept = target_probs(logits, one, torch.tensor([3]), torch.tensor([1.0]), None)
    assert torch.allclose(kept, torch.tensor([[0.4, 0.3, 0.2, 0, 0]]) / 0.9)
    kept = target_probs(logits, one, torch.tensor([1 << 30]), torch.tensor([0.65]), None)  # 0.7 > 0.65 before 0.2
    assert torch.allclose(kept, torch.tensor([[0.4, 0.3, 0, 0, 0]]) / 0.7)
    kept = target_probs(logits, one, torch.tensor([1 << 30]), torch.tensor([1.0]), torch.tensor([0.45]))
    assert torch.allclose(kept, torch.tensor([[0.4, 0.3, 0.2, 0, 0]]) / 0.9)


def test_target_probs_judges_top_k_and_top_p_together_unless_sequential():
    """Joint: top-p on the softmax's mass, top-k on its ranks (the shorter prefix). Sequential (SGLang's
    flashinfer sampler with min-p on): top-p on what top-k left, renormalised, which keeps less here."""
    logits = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.06, 0.04]]))
    one = torch.ones(1, 1)
    joint = target_probs(logits, one, torch.tensor([3]), torch.tensor([0.75]), None)
    assert torch.allclose(joint, torch.tensor([[0.4, 0.3, 0.2, 0, 0]]) / 0.9)  # mass before 0.2 is 0.7 <= 0.75
    sequential = target_probs(logits, one, torch.tensor([3]), torch.tensor([0.75]), None, sequential=True)
    assert torch.allclose(sequential, torch.tensor([[0.4, 0.3, 0, 0, 0]]) / 0.7)  # 0.7 / 0.9 > 0.75 before 0.2
    off = target_probs(logits, one, None, None, None)  # filters off: the softmax itself
    assert torch.allclose(off, torch.tensor([[0.4, 0.3, 0.2, 0.06, 0.04]]))


def test_target_probs_runs_the_kernels_it_is_given():
    """The release's fused kernels replace the torch renormalisations, in the joint order (top-p, then top-k)."""
    calls = []

    def top_k(probs, ks):
        calls.append("top_k")
        return chain_sampling.renorm_top_k(probs, ks)

    def top_p(probs, ps):
        calls.append("top_p")
        return chain_sampling.renorm_top_p(probs, ps)

    logits = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.06, 0.04]]))
    kept = target_probs(logits, torch.ones(1, 1), torch.tensor([3]), torch.tensor([0.75]), None, (top_k, top_p))
    assert calls == ["top_p", "top_k"]
    assert torch.allclose(kept, torch.tensor([[0.4, 0.3, 0.2, 0, 0]]) / 0.9)
