"""SBD (set block decoding) as a drafter plugin.

SBD commits 1..k tokens per step, so the target verifies ``verify_width``
tokens per request, which need not equal ``speculative_num_draft_tokens``.
Settings (``[algorithms.SBD]`` in plugins.toml):

* ``verify_width``: tokens each request verifies (default: num_draft_tokens);
* ``max_tokens_per_req`` (a framework key): the largest width allowed.

The worker class (``worker.py``) is where a real SBD implementation plugs
its drafting and acceptance logic; this example shows the contract, not a
drafter. ``supports_overlap=False``: the worker runs synchronously, so the
operator passes ``--disable-overlap-schedule`` (SGLang 0.5.12-0.5.23 refuse
to start such an algorithm without it).
"""

from sglang_spec_plugins import AlgorithmSpec, hookimpl

ALGORITHM = "SBD"


def _worker_factory(server_args):
    from .worker import SBDWorker  # imports SGLang: only ever called inside SGLang's processes

    return SBDWorker


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name=ALGORITHM, worker_factory=_worker_factory, supports_overlap=False)]


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, settings):
    if algorithm != ALGORITHM:
        return None
    return settings.get("verify_width", num_draft_tokens)
