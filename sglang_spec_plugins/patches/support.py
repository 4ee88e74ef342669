"""What a plugin algorithm gets from an attention backend: :class:`Support`.

Each backend module answers for its own backends next to its patches (a
``support(width, ndt, verify_shape, is_draft_worker)`` function in its
``SUPPORT`` table); :mod:`.attention_support` dispatches over them.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple, Sequence

from ..engine.probe import installed_version
from .unit import MethodPatch, Verdict


class Serving(str, Enum):
    """How a backend serves a plugin verify on the installed release."""

    SERVED = "served"    # upstream lays it out right
    PATCHED = "patched"  # right once the loader's patches apply
    REFUSED = "refused"  # the loader refuses it at start-up, or must

    def __str__(self) -> str:
        return self.value


class Support(NamedTuple):
    """A backend's :class:`Serving` verdict for one plugin verify, with the reason."""

    verdict: Serving
    reason: str


CAPTURE = "the CUDA-graph capture gets the verify input of the declared shape (capture_input)"
"""Why a backend that reads the verify input is right under CUDA graphs."""

EAGLE_TREE_ONLY = "verifies a tree only through EAGLE's topk machinery, which a plugin verify input lacks"


def any_applies(patches: Sequence[MethodPatch]) -> bool:
    """Whether some of ``patches`` applies on the installed release."""
    release = installed_version()
    return any(p.plan(release).verdict == Verdict.APPLY for p in patches)
