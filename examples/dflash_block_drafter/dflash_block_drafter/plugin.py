"""DFLASH_BLOCK: a DFLASH-style block drafter with a draft model of its own.

Each decode step its draft model (SGLang's DFlash draft model, the layout a
published DFlash checkpoint has) drafts a block of ``B`` tokens per request
in one TARGET_VERIFY forward on its own draft runner, and the target
verifies the first ``W <= B`` of them (``worker.py``): the draft runner's
width and the target's differ, which the width hook's ``is_draft_worker``
tells apart. Every request is decoded exactly as plain decoding decodes it
(greedy token for token, sampled in distribution); at ``W = B`` it drafts and
verifies as SGLang's own ``--speculative-algorithm DFLASH`` does.

Settings (``[algorithms.DFLASH_BLOCK]`` in plugins.toml):

* ``block_size``: tokens the draft runner drafts per request, ``B``
  (default, and at most: ``--speculative-num-draft-tokens``, the KV slots the
  scheduler reserves per step; SGLang's DFLASH always drafts that many); it
  must be the draft checkpoint's ``block_size``;
* ``verify_width``: tokens the target verifies per request, the block's
  first ``W`` (default, and at most: the whole block).

A ``block_size`` above ``--speculative-num-draft-tokens`` or a ``verify_width``
above the block is refused while SGLang resolves its arguments (and by
``check``), naming the key: the worker could not serve it. ``B`` and ``W``
are one width each at every step (the block base's rule), so widths by
batch size that give several are refused too. Serving it (SGLang 0.5.14+):
``--speculative-algorithm DFLASH_BLOCK --speculative-draft-model-path DRAFT
--speculative-num-draft-tokens B`` (one GPU per model, ``--tp-size 1``),
under SGLang's overlap scheduler (its default, 0.5.16+; ``--disable-overlap-schedule``
runs it synchronously, and 0.5.14-0.5.15 need it). The draft
checkpoint is checked while SGLang resolves its arguments (architecture,
hidden size, block size, mask token). It serves the requests PROMPT_LOOKUP
serves and refuses the same (HTTP 400 naming why); the server goes on.
"""

from typing import Tuple

from sglang_spec_plugins import AlgorithmSpec, DraftModel, hookimpl, is_plain_int

ALGORITHM = "DFLASH_BLOCK"
TABLE = f"[algorithms.{ALGORITHM}]"


def block_widths(settings, num_draft_tokens: int) -> Tuple[int, int]:
    """``(B, W)`` at ``num_draft_tokens``: the block the draft runner drafts and the
    tokens of it the target verifies; ValueError naming the key that is not an int
    from 1 to its bound (``block_size``: ``num_draft_tokens``, the KV slots the
    scheduler reserves per request each step; ``verify_width``: the block)."""
    block = settings.get("block_size", num_draft_tokens)
    if not is_plain_int(block) or not 1 <= block <= num_draft_tokens:
        raise ValueError(f"{TABLE} block_size = {block!r}: it must be an int from 1 to --speculative-num-draft-tokens "
                         f"({num_draft_tokens}), the KV slots the scheduler reserves per request each step")
    width = settings.get("verify_width", block)
    if not is_plain_int(width) or not 1 <= width <= block:
        of = "block_size" if "block_size" in settings else "--speculative-num-draft-tokens"
        raise ValueError(f"{TABLE} verify_width = {width!r}: it must be an int from 1 to the block the draft model "
                         f"drafts ({block}, {of}): the target verifies the block's first verify_width tokens")
    return block, width


def _worker_factory(server_args):
    from .worker import DFlashBlockWorker  # imports SGLang: only ever called inside SGLang's processes

    return DFlashBlockWorker


def _validate(server_args):
    """The block base's argument check (the drafts come from the target's LM head on one rank:
    --tp-size 1), then the block and verify width at --speculative-num-draft-tokens."""
    from sglang_spec_plugins.worker import policy_for, require_block_args  # the worker API: imported only when it runs

    require_block_args(ALGORITHM, server_args)
    ndt = getattr(server_args, "speculative_num_draft_tokens", None)
    if ndt is not None:
        block_widths(policy_for(server_args).settings, ndt)


class DFlashBlockPlugin:
    """Hooks may live on an object: the entry point names its instance, ``plugin``."""

    @hookimpl
    def sgl_spec_algorithms(self):
        return [AlgorithmSpec(name=ALGORITHM, worker_factory=_worker_factory, supports_overlap=True,
                              validate_server_args=_validate, draft_model=DraftModel())]

    @hookimpl
    def sgl_spec_verify_width(self, algorithm, num_draft_tokens, is_draft_worker, settings):
        if algorithm != ALGORITHM:
            return None
        block, width = block_widths(settings, num_draft_tokens)
        return block if is_draft_worker else width

    @hookimpl
    def sgl_spec_draft_may_verify(self, algorithm):
        return True if algorithm == ALGORITHM else None


plugin = DFlashBlockPlugin()
