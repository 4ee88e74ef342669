"""A DFLASH-style block-diffusion drafter as a plugin, written as a class.

The drafter proposes a block of ``block_size`` tokens (setting, default 16)
and its own model runner runs TARGET_VERIFY over the block, so it answers
yes to draft-may-verify and verifies exactly one block per request.
"""

from sglang_spec_plugins import AlgorithmSpec, hookimpl

ALGORITHM = "DFLASH_BLOCK"


def _worker_factory(server_args):
    from .worker import DFlashBlockWorker  # imports SGLang: only ever called inside SGLang's processes

    return DFlashBlockWorker


def _validate(server_args):
    if getattr(server_args, "speculative_num_draft_tokens", None) not in (None, 16):
        raise ValueError("DFLASH_BLOCK verifies blocks of 16: set --speculative-num-draft-tokens 16")


class DFlashBlockPlugin:
    """Hooks may live on an object: the entry point names its instance, ``plugin``."""

    @hookimpl
    def sgl_spec_algorithms(self):
        return [
            AlgorithmSpec(
                name=ALGORITHM,
                worker_factory=_worker_factory,
                supports_overlap=True,
                validate_server_args=_validate,
            )
        ]

    @hookimpl
    def sgl_spec_verify_width(self, algorithm, settings):
        if algorithm != ALGORITHM:
            return None
        return settings.get("block_size", 16)

    @hookimpl
    def sgl_spec_max_verify_width(self, algorithm, num_draft_tokens, settings):
        if algorithm != ALGORITHM:
            return None
        return max(num_draft_tokens, settings.get("block_size", 16))

    @hookimpl
    def sgl_spec_draft_may_verify(self, algorithm):
        return True if algorithm == ALGORITHM else None


plugin = DFlashBlockPlugin()
