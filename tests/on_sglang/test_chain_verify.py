"""The chain verifier samples through the release's own renormalising kernels where its sampler binds them
(CUDA), in the order plain sampling filters: top-k and top-p judged together, or one after the other where
SGLang's flashinfer sampler has min-p on. On a CPU the sampler binds none, and the torch renormalisations run."""

import importlib
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from sglang_spec_plugins.engine import chain_sampling  # noqa: E402
from sglang_spec_plugins.engine.chain_verify import ChainVerifier  # noqa: E402
from sglang_spec_plugins.engine.worker_contract import contract  # noqa: E402

PROBS = [0.4, 0.3, 0.2, 0.06, 0.04]


def _batch(min_p):
    """One sampled request at temperature 1, top-k 3, top-p 0.75 (and ``min_p``), as SGLang's sampling_info holds it."""
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(temperature=1.0, top_k=3, top_p=0.75, min_p=min_p)
    info = SimpleNamespace(temperatures=torch.ones(1, 1), top_ks=torch.tensor([3], dtype=torch.int32),
                           top_ps=torch.tensor([0.75]), min_ps=torch.tensor([min_p]), need_min_p_sampling=min_p > 0,
                           need_top_k_sampling=True, need_top_p_sampling=True, is_all_greedy=False, logit_bias=None)
    return SimpleNamespace(reqs=[SimpleNamespace(sampling_params=params)], sampling_info=info, return_logprob=False)


def _committed_distribution(verifier, batch, draws=4000):
    """How often each token commits after a one-token chain (no drafts: plain sampling's own draw)."""
    counts = torch.zeros(len(PROBS))
    torch.manual_seed(0)
    for _ in range(draws):  # fresh logits each draw: the verifier leaves the ones it filtered in the output
        logits = SimpleNamespace(next_token_logits=torch.log(torch.tensor([PROBS])))
        rows, _ = verifier(batch, logits, torch.zeros((1, 1), dtype=torch.int64))
        counts[rows[0, 0]] += 1
    return counts / draws


@pytest.mark.parametrize("backend, min_p, order, kept", [
    ("flashinfer", 0.0, ["top_p", "top_k"], 3),  # joint: the prefix both keep
    ("pytorch", 0.01, ["top_p", "top_k"], 3),  # SGLang's torch sampler is joint with min-p too
    ("flashinfer", 0.01, ["top_k", "top_p"], 2),  # top-p on top-k's renormalised rest: 0.7 / 0.9 > 0.75
])
def test_the_verifier_renormalises_with_the_release_s_kernels_in_plain_sampling_s_order(monkeypatch, backend, min_p,
                                                                                       order, kept):
    sampler = importlib.import_module("sglang.srt.layers.sampler")
    calls = []

    def kernel(name, torch_version):
        def run(probs, values):
            calls.append(name)
            return torch_version(probs, values)
        return run

    monkeypatch.setattr(sampler, "top_k_renorm_prob", kernel("top_k", chain_sampling.renorm_top_k), raising=False)
    monkeypatch.setattr(sampler, "top_p_renorm_prob", kernel("top_p", chain_sampling.renorm_top_p), raising=False)
    frequencies = _committed_distribution(ChainVerifier(contract(), backend), _batch(min_p))
    assert calls[:2] == order
    assert frequencies[kept:].sum() == 0 and (frequencies[:kept] > 0).all()


def test_on_a_cpu_the_sampler_binds_no_kernel_and_torch_renormalises():
    sampler = importlib.import_module("sglang.srt.layers.sampler")
    assert getattr(sampler, "top_p_renorm_prob", None) is None  # bound on CUDA (and MUSA) only
    frequencies = _committed_distribution(ChainVerifier(contract(), "flashinfer"), _batch(0.0))
    assert frequencies[3:].sum() == 0 and (frequencies[:3] > 0).all()
