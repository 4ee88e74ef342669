"""The start-up gate: a plugin algorithm never runs on an attention backend
that would lay its TARGET_VERIFY out wrong.

Every attention backend a model runner (target or draft) builds goes through
one function per release that looks the ``--attention-backend`` name up in
SGLang's registry ``ATTENTION_BACKENDS`` and calls the factory registered
there: ``ModelRunner._get_attention_backend_from_str`` up to 0.5.15,
``attention_backend_setup._build_full_attention_backend_from_str`` from
0.5.16 (a prefill/decode pair builds through it twice, so both are gated).
``backends.gate`` wraps that function: for a plugin algorithm on a worker
that runs TARGET_VERIFY it asks :func:`.attention_support.support_at_widths`
(:func:`.attention_support.attention_support` at every width a step may use)
about the backend at the plugin's width and declared verify shape, and
refuses with an :class:`EngineError` before the factory runs when the answer
is ``refused`` (the half of a prefill/decode pair that does not run
TARGET_VERIFY is not judged: :func:`verifies_elsewhere`); backends the project has not examined (registered by a
future release, or by another package) are trusted only with a chain at
``speculative_num_draft_tokens``. Built-in algorithms, and draft workers
that do not verify, build exactly as before.
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import Tuple

from ..engine.facts import DRAFT, TARGET, configured_ndt, verify_backends
from ..errors import EngineError
from .refusal import refusal, verifying_policy
from .unit import Target, Verdict, WrapPatch

_MLA_NAMES = {"flashinfer": "flashinfer_mla", "aiter": "aiter_mla"}
"""Registry names whose factory builds another backend for an MLA model."""


def classified_name(backend_str: str, model_runner) -> str:
    """The name :func:`attention_support` classifies: the registry name, or
    its MLA backend's where the factory builds that for an MLA model."""
    if getattr(model_runner, "use_mla_backend", False):
        return _MLA_NAMES.get(backend_str, backend_str)
    return backend_str


def verifies_elsewhere(backend_str: str, model_runner) -> bool:
    """True where the runner's server arguments name another backend for its
    TARGET_VERIFY: ``backend_str`` is then the half of a prefill/decode pair
    that only prefills or only decodes (SGLang's hybrid backend sends
    TARGET_VERIFY to one half, by ``speculative_attention_mode``), and what
    it would lay out wrong for a verify never reaches it. False where no
    backend is named (SGLang picks one: it is judged as built)."""
    named = verify_backends(getattr(model_runner, "server_args", None))
    verifier = named.get(DRAFT if model_runner.is_draft_worker else TARGET)
    return verifier is not None and verifier != backend_str


def check(backend_str: str, model_runner) -> None:
    """Raise EngineError if this runner's plugin algorithm must not verify on ``backend_str``."""
    from .attention_support import support_at_widths  # not at import: the backends' answers, asked when one is built
    from .support import Serving

    policy = verifying_policy(model_runner)
    if policy is None or verifies_elsewhere(backend_str, model_runner):
        return
    is_draft = bool(model_runner.is_draft_worker)
    ndt = configured_ndt(model_runner)
    shape = model_runner.spec_algorithm.verify_shape
    name = classified_name(backend_str, model_runner)
    width, support = support_at_widths(name, policy, ndt, shape, is_draft)
    if support.verdict == Serving.REFUSED:
        raise EngineError(refusal(policy, is_draft, width, ndt, name, support.reason, shape))


_PARAMETERS = r"def \w+\(\s*(\*\s*,\s*)?(self|model_runner)\b[^)]*\bbackend_str\b"
"""The parameters the wrapper reads: the runner (or ``self``) first, then ``backend_str``."""


def _condition(source: str) -> Tuple[str, str]:
    if not re.match(_PARAMETERS, source):
        return Verdict.REFUSED, "unknown shape: the function does not take (model_runner or self, backend_str, ...) first"
    if "ATTENTION_BACKENDS[backend_str](" in source:
        return Verdict.APPLY, "builds every attention backend from the registry: refuse, before the factory runs, a plugin " \
                        "algorithm the backend would not verify right"
    return Verdict.REFUSED, "unknown shape: the attention backend is not built from ATTENTION_BACKENDS[backend_str]"


def _wrapper(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def build(*args, **kwargs):
        arguments = signature.bind(*args, **kwargs).arguments
        check(arguments["backend_str"], arguments.get("model_runner", arguments.get("self")))
        return original(*args, **kwargs)

    return build


GATE = WrapPatch(
    name="backends.gate",
    summary="attention backend factory: refuse a plugin algorithm on a backend that would not verify it right",
    alternatives=(
        Target("sglang.srt.model_executor.model_runner_components.attention_backend_setup",
               "_build_full_attention_backend_from_str"),  # 0.5.16+
        Target("sglang.srt.model_executor.model_runner", "ModelRunner._get_attention_backend_from_str"),  # up to 0.5.15
    ),
    condition=_condition,
    wrapper=_wrapper,
)

PATCHES = (GATE,)
