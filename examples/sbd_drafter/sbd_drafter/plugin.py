"""SBD: SBD-style self-speculation, the target predicts a masked block (no draft model).

Each decode step every request verifies, in one TARGET_VERIFY forward of the
target, the chain ``[root, g_1..g_k, M, ..., M]`` of the step's width: its
last committed token, the target's own guesses carried from the previous
step (its argmax at the chain positions past what that step accepted: Jacobi
iteration) and the mask token ``M`` for the rest (``blocks.py``).
Verification (the chain base's) decides what commits, so any target decodes
every request exactly as plain decoding does (greedy token for token, sampled
in distribution); a target trained for set block decoding predicts masked
positions well and commits more per step. The
worker picks each step's width itself (``StepWidths.at(batch_size, width)``):
the smallest of the batch's widths that holds the root, the most guesses a
request of the batch carries and ``mask_block`` masks, else the largest
(``worker.py``). Requests shorter than the width are padded with ``M``.

Settings (``[algorithms.SBD]`` in plugins.toml):

* ``verify_width``: the width (default: ``--speculative-num-draft-tokens``);
* ``mask_token_id``: the mask token (default: the last id of the target's
  vocabulary); an int in ``[0, vocab_size)``;
* ``mask_block``: the masks a step's width makes room for (default 1), an int >= 1;
* ``max_tokens_per_req``, ``widths_by_batch_size`` (widths to choose from,
  ``{1 = [2, 4, 8], 8 = [2, 4]}``) (framework keys): as PROMPT_LOOKUP's; with
  one width the width is fixed. The worker picks its widths itself
  (``picks_widths=True``), so ``widths_by_acceptance`` is refused.

Serving it: as PROMPT_LOOKUP (SGLang 0.5.14+, under SGLang's overlap scheduler
or without it; the same requests served, the same refused).
"""

from typing import Optional, Tuple

from sglang_spec_plugins import AlgorithmSpec, hookimpl, is_plain_int

ALGORITHM = "SBD"
TABLE = f"[algorithms.{ALGORITHM}]"


def block_settings(settings, vocab_size: Optional[int] = None) -> Tuple[Optional[int], int]:
    """``(mask_token_id, mask_block)``; ValueError naming the key when
    ``mask_block`` is not an int >= 1 or ``mask_token_id`` not an int in
    ``[0, vocab_size)`` (``vocab_size`` None: only ``>= 0`` is checked, and the
    default mask token, ``vocab_size - 1``, is None until the vocabulary is known)."""
    block = settings.get("mask_block", 1)
    if not is_plain_int(block) or block < 1:
        raise ValueError(f"{TABLE} mask_block = {block!r}: it must be an int >= 1")
    mask = settings.get("mask_token_id")
    if mask is None:
        return (None if vocab_size is None else vocab_size - 1), block
    if not is_plain_int(mask) or mask < 0 or vocab_size is not None and mask >= vocab_size:
        within = f"[0, {vocab_size})" if vocab_size is not None else "[0, vocab_size)"
        raise ValueError(f"{TABLE} mask_token_id = {mask!r}: it must be an int in {within}, a token id of the "
                         "target's vocabulary")
    return mask, block


def _validate(server_args):
    """The chain base's release check (SGLang 0.5.14+), then the mask token against the
    target's vocabulary where its ``config.json`` is in a local ``--model-path``
    (before any weight loads; otherwise the worker checks it when it is built)."""
    from sglang_spec_plugins.worker import policy_for, require_chain_release, target_vocab_size

    require_chain_release(ALGORITHM)
    vocab = target_vocab_size(server_args)
    if vocab is not None:
        block_settings(policy_for(server_args).settings, vocab)


def _worker_factory(server_args):
    from .worker import SBDWorker  # imports SGLang: only ever called inside SGLang's processes

    return SBDWorker


@hookimpl
def sgl_spec_algorithms():
    # has_draft_kv=False: no draft model, so no draft KV to size or transfer (as PROMPT_LOOKUP)
    # picks_widths: the worker picks each step's width itself (the smallest that holds the block)
    return [AlgorithmSpec(name=ALGORITHM, worker_factory=_worker_factory, supports_overlap=True,
                          validate_server_args=_validate, capabilities={"has_draft_kv": False}, picks_widths=True)]


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, settings):
    if algorithm != ALGORITHM:
        return None
    block_settings(settings)  # bad settings stop the server at load, naming the key
    return settings.get("verify_width", num_draft_tokens)
