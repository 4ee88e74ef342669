"""CONTROLLED_ACCEPTANCE: a chain drafter whose acceptance is set, for measuring speculative decoding.

It drafts, for each request, the target's own greedy continuation of the
request's prompt, recorded from a plain run, keeping each draft token with
probability ``acceptance`` (``draws.py``); verification and acceptance are
PROMPT_LOOKUP's (its worker, with this drafting rule), so outputs are exactly
plain decoding's (greedy token for token, sampled in distribution). The set
acceptance is that of greedy requests: a sampled request accepts a draft with
the target's probability of it. Where a request has no recorded
continuation, or its output has left it (a kernel that rounds a near-tie the
other way), it drafts by prompt lookup instead.

Settings (``[algorithms.CONTROLLED_ACCEPTANCE]`` in plugins.toml):

* ``continuations`` (required): a JSON file ``{prompt_key: [token ids]}``
  (``draws.prompt_key`` of the prompt's token ids; ``record.py`` writes it);
* ``acceptance`` (default 0.7): the probability a draft token is kept; a
  request overrides it with ``sampling_params.custom_params["acceptance"]``;
* ``seed`` (default 0): the draws' seed;
* ``width_cycle`` (optional): the worker picks each decode step's width
  itself, these widths in turn (each one the algorithm declares, through
  ``widths_by_batch_size``), ``width_cycle_steps`` steps each (default 1:
  another width every step), instead of the framework's width: for
  measuring what a switch of width costs (``widths_by_acceptance`` is then
  refused: the worker picks, ``picks_widths``);
* ``verify_width``, ``max_ngram``, ``min_ngram``, and the framework keys
  ``max_tokens_per_req``, ``widths_by_batch_size``, ``widths_by_acceptance``:
  as PROMPT_LOOKUP's.

Serving it: as PROMPT_LOOKUP (SGLang 0.5.14+, under SGLang's overlap scheduler
or without it). A request whose ``custom_params["acceptance"]`` is not a
number from 0 to 1 is refused with HTTP 400 naming it.
"""

import json
import math
from pathlib import Path

from prompt_lookup_drafter.plugin import ngram_settings

from sglang_spec_plugins import AlgorithmSpec, hookimpl, is_plain_int

ALGORITHM = "CONTROLLED_ACCEPTANCE"
TABLE = f"[algorithms.{ALGORITHM}]"


def acceptance_value(value, where: str) -> float:
    """An acceptance: a number from 0 to 1; ValueError naming ``where`` otherwise."""
    if type(value) not in (int, float) or not math.isfinite(value) or not 0 <= value <= 1:
        raise ValueError(f"{where} = {value!r}: the acceptance must be a number from 0 to 1")
    return float(value)


def settings_of(settings):
    """``(continuations path, acceptance, seed)``; ValueError naming the key that is wrong."""
    path = settings.get("continuations")
    if not isinstance(path, str) or not path:
        raise ValueError(f"{TABLE} continuations = {path!r}: give the JSON file of recorded continuations "
                         "(controlled_acceptance_drafter/record.py writes it from a plain run)")
    seed = settings.get("seed", 0)
    if type(seed) is not int:
        raise ValueError(f"{TABLE} seed = {seed!r}: it must be an int")
    return path, acceptance_value(settings.get("acceptance", 0.7), f"{TABLE} acceptance"), seed


def width_cycle_of(settings, num_draft_tokens: int):
    """``(widths, steps per width)`` of ``width_cycle``, or None where it is not set;
    ValueError naming the key that is wrong (a width must be an int from 1 to
    ``num_draft_tokens``)."""
    widths = settings.get("width_cycle")
    steps = settings.get("width_cycle_steps", 1)
    if widths is None:
        if "width_cycle_steps" in settings:
            raise ValueError(f"{TABLE} width_cycle_steps = {steps!r}: it takes a width_cycle")
        return None
    if not isinstance(widths, (list, tuple)) or not widths or not all(is_plain_int(w) and 1 <= w <= num_draft_tokens for w in widths):
        raise ValueError(f"{TABLE} width_cycle = {widths!r}: give a list of widths, each an int from 1 to "
                         f"speculative_num_draft_tokens ({num_draft_tokens})")
    if not is_plain_int(steps) or steps < 1:
        raise ValueError(f"{TABLE} width_cycle_steps = {steps!r}: it must be an int >= 1")
    return tuple(widths), steps


_loaded = {}
"""``(path, mtime_ns, size)`` -> the continuations read from it: each file is read once per process."""


def load_continuations(path: str):
    """The recorded continuations ``{prompt_key: [token ids]}``, read once per
    process per file (a file changed since, by its mtime or size, is read again);
    ValueError naming the file."""
    try:
        stat = Path(path).stat()
        key = (path, stat.st_mtime_ns, stat.st_size)
        if key in _loaded:
            return _loaded[key]
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{TABLE} continuations = {path!r}: cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, list) and all(type(t) is int for t in v) for v in data.values()):
        raise ValueError(f"{TABLE} continuations = {path!r}: expected {{prompt_key: [token ids]}}")
    _loaded[key] = data
    return data


def _worker_factory(server_args):
    from .worker import ControlledAcceptanceWorker  # imports SGLang: only ever called inside SGLang's processes

    return ControlledAcceptanceWorker


def _validate(server_args):
    """The chain base's release check (SGLang 0.5.14+), while SGLang resolves its arguments."""
    from sglang_spec_plugins.worker import require_chain_release  # the worker API: imported only when it runs

    require_chain_release(ALGORITHM)


def _picks_widths(settings) -> bool:
    """Whether the worker picks each step's width itself: where ``width_cycle`` is set."""
    return settings.get("width_cycle") is not None


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name=ALGORITHM, worker_factory=_worker_factory, supports_overlap=True,
                          validate_server_args=_validate, capabilities={"has_draft_kv": False},
                          picks_widths=_picks_widths)]


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, settings):
    if algorithm != ALGORITHM:
        return None
    # bad settings, or a continuations file that cannot be read, stop the server at load (before any
    # weight loads), naming the key
    load_continuations(settings_of(settings)[0])
    ngram_settings(settings)
    width_cycle_of(settings, num_draft_tokens)
    return settings.get("verify_width", num_draft_tokens)
