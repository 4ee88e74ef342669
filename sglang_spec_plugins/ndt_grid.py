"""Which ``speculative_num_draft_tokens`` values to ask an algorithm about
when the operator named none (``check`` without ``-n``, the conformance kit).

A width rule can be wrong at one ndt only (a wrong-case comparison that never
matches, a branch for ndt >= 32): the grid covers small ndts, the common 8 and
16, and the 32 and 64 that big block drafters use, plus any the author
configures. An ndt above the algorithm's ``max_tokens_per_req`` is left out
(plugins.toml itself forbids it), and so is one its ``validate_server_args``
refuses: SGLang would never ask for a width there.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Iterable, Optional, Tuple

from .errors import PluginError
from .plugins import OfferedAlgorithm

DEFAULT_NDTS = (1, 2, 3, 4, 5, 8, 16, 32, 64)


def validator_args(algorithm: str, ndt: int, disable_overlap: bool) -> SimpleNamespace:
    """The fields of SGLang's ``ServerArgs`` a validator reads at start-up, for
    a machine without SGLang (where SGLang is installed, pass its own)."""
    return SimpleNamespace(speculative_algorithm=algorithm, speculative_num_draft_tokens=ndt,
                           disable_overlap_schedule=disable_overlap)


def grid(offered: OfferedAlgorithm, extra: Iterable[int] = ()) -> Tuple[int, ...]:
    """:data:`DEFAULT_NDTS` and ``extra``, sorted, without those above the
    algorithm's ``max_tokens_per_req``."""
    cap = offered.config.max_tokens_per_req
    return tuple(n for n in sorted(set(DEFAULT_NDTS) | set(extra)) if cap is None or n <= cap)


def accepted(offered: OfferedAlgorithm, ndts: Iterable[int], make_args: Callable[..., Any] = validator_args,
             on_other: Optional[Callable[[int, BaseException], None]] = None) -> Tuple[int, ...]:
    """The ``ndts`` the algorithm's ``validate_server_args`` accepts (all of
    them without one). It refuses with ValueError, SGLang's way; any other
    exception is passed to ``on_other(ndt, exc)`` (which may raise) and the
    ndt counts as refused."""
    validate = offered.spec.validate_server_args
    if validate is None:
        return tuple(ndts)
    found = []
    for ndt in ndts:
        try:
            with offered.code("validate_server_args"):  # an interrupt stops here, naming the plugin
                validate(make_args(offered.name, ndt, not offered.spec.supports_overlap))
        except PluginError as exc:
            if not isinstance(exc.__cause__, ValueError) and on_other is not None:
                on_other(ndt, exc.__cause__)
            continue
        found.append(ndt)
    return tuple(found)
