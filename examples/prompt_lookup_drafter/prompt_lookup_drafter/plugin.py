"""PROMPT_LOOKUP: a model-free chain drafter that really drafts.

Each decode step it drafts, for every request, the tokens that followed the
request's last n-gram earlier in its own prompt and output (``lookup.py``),
verifies them with the target model in one TARGET_VERIFY forward at the
plugin's width and commits what verification accepts (``worker.py``, on
``chain_worker_base()``): a greedy request exactly the tokens plain greedy
decoding gives, a sampled one tokens distributed exactly as plain sampling's.

Settings (``[algorithms.PROMPT_LOOKUP]`` in plugins.toml):

* ``verify_width``: tokens each request verifies, its last token and
  ``verify_width - 1`` drafts (default: ``--speculative-num-draft-tokens``);
* ``max_ngram`` / ``min_ngram``: the n-gram lengths looked up, longest
  first (default 3 and 1);
* ``max_tokens_per_req`` (a framework key): the largest width allowed;
* ``widths_by_batch_size`` (a framework key), e.g. ``{1 = 4, 8 = 2}``: a width
  per batch-size bucket instead of ``verify_width`` (each step drafts and
  verifies its batch's width); a bucket may give several,
  ``{1 = [2, 4, 8, 16], 8 = [1, 2, 4, 8], 64 = [1, 2]}``;
* ``widths_by_acceptance`` (a framework key), ``true`` or a table of its
  settings: the built-in acceptance controller picks each step's width among
  its bucket's, from the tokens the steps commit (1: plain decoding).

Serving it (SGLang 0.5.14+, whose scheduler drives plugin workers on the V2
schema): ``--speculative-algorithm PROMPT_LOOKUP --speculative-num-draft-tokens N``,
under SGLang's overlap scheduler (its default; ``--disable-overlap-schedule``
runs it synchronously). It serves greedy, sampled, penalised, ``logit_bias``,
``min_new_tokens``, logprob and grammar requests as plain decoding serves
them; a request it cannot serve exactly (a custom logit processor, sampling
under ``--enable-deterministic-inference``) is refused with HTTP 400 naming
why, and the server goes on.
"""

from sglang_spec_plugins import AlgorithmSpec, hookimpl, is_plain_int

ALGORITHM = "PROMPT_LOOKUP"
NGRAM_DEFAULTS = {"max_ngram": 3, "min_ngram": 1}
"""Settings besides ``verify_width`` and their defaults."""


def ngram_settings(settings):
    """``(max_ngram, min_ngram)`` from the algorithm's settings; ValueError naming
    the key when they are not ints with ``1 <= min_ngram <= max_ngram``."""
    values = {key: settings.get(key, default) for key, default in NGRAM_DEFAULTS.items()}
    for key, value in values.items():
        if not is_plain_int(value) or value < 1:
            raise ValueError(f"[algorithms.{ALGORITHM}] {key} = {value!r}: it must be an int >= 1")
    if values["min_ngram"] > values["max_ngram"]:
        raise ValueError(f"[algorithms.{ALGORITHM}] min_ngram = {values['min_ngram']} is above "
                         f"max_ngram = {values['max_ngram']}")
    return values["max_ngram"], values["min_ngram"]


def _worker_factory(server_args):
    from .worker import PromptLookupWorker  # imports SGLang: only ever called inside SGLang's processes

    return PromptLookupWorker


def _validate(server_args):
    """The chain base's release check (SGLang 0.5.14+), while SGLang resolves its arguments."""
    from sglang_spec_plugins.worker import require_chain_release  # the worker API: imported only when it runs

    require_chain_release(ALGORITHM)


@hookimpl
def sgl_spec_algorithms():
    # has_draft_kv=False: no draft model, so no draft KV to size or transfer (SGLang's answer for NGRAM)
    return [AlgorithmSpec(name=ALGORITHM, worker_factory=_worker_factory, supports_overlap=True,
                          validate_server_args=_validate, capabilities={"has_draft_kv": False})]


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, settings):
    if algorithm != ALGORITHM:
        return None
    ngram_settings(settings)  # bad n-gram settings stop the server at load, naming the key
    return settings.get("verify_width", num_draft_tokens)
