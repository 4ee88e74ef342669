"""SBD (set block decoding) as a drafter plugin.

SBD commits 1..k tokens per step, so the target verifies ``verify_width``
tokens per request, which need not equal ``speculative_num_draft_tokens``.
Settings (``[algorithms.SBD]`` in plugins.toml):

* ``verify_width``: tokens each request verifies (default: num_draft_tokens);
* ``max_tokens_per_req`` (a framework key): the largest width allowed.

The worker class is where a real SBD implementation plugs its drafting and
acceptance logic; this example shows the contract, not a drafter.
"""

from sglang_spec_plugins import AlgorithmSpec, hookimpl

ALGORITHM = "SBD"


class SBDWorker:
    """Placeholder for the SBD speculative worker SGLang instantiates.

    A real drafter subclasses SGLang's speculative worker base of the
    release it targets; SGLang creates it with its own arguments.
    """

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("sbd_drafter is an example of the plugin contract; it carries no SBD model")


def _worker_factory(server_args):
    return SBDWorker


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name=ALGORITHM, worker_factory=_worker_factory, supports_overlap=False)]


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, settings):
    if algorithm != ALGORITHM:
        return None
    return settings.get("verify_width", num_draft_tokens)
