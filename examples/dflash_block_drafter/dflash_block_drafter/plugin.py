"""DFLASH_BLOCK: a DFLASH-style block drafter with its own draft model. PROTOTYPE."""

from sglang_spec_plugins import AlgorithmSpec, hookimpl

ALGORITHM = "DFLASH_BLOCK"


def _worker_factory(server_args):
    from .worker import DFlashBlockWorker

    return DFlashBlockWorker


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name=ALGORITHM, worker_factory=_worker_factory, supports_overlap=False)]


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, is_draft_worker, settings):
    if algorithm != ALGORITHM:
        return None
    return num_draft_tokens if is_draft_worker else settings.get("verify_width", num_draft_tokens)


@hookimpl
def sgl_spec_draft_may_verify(algorithm):
    return True if algorithm == ALGORITHM else None
