"""Registering plugin algorithms in SGLang's per-process algorithm registry.

:func:`register_all` is all-or-nothing: if any algorithm cannot be
registered, those registered by the same call are removed again and the
error names the algorithm, its plugin and the SGLang release.
"""

from __future__ import annotations

import logging
from typing import Dict, Iterable, List, Tuple

from ..errors import EngineError, printable
from ..plugins import OfferedAlgorithm
from ..policy import VerifyPolicy
from ..capabilities import CAPABILITIES
from ..engine.algorithm import _PolicyMethods, spec_class_for, unasked_capabilities
from ..engine.probe import EngineProbe

logger = logging.getLogger("sglang_spec_plugins")


def registered(name: str):
    """The algorithm object SGLang's registry holds for ``name``, or None."""
    from sglang.srt.speculative import spec_registry

    return spec_registry.get_spec(name)


def register_all(
    entries: Iterable[Tuple[OfferedAlgorithm, VerifyPolicy]], probe: EngineProbe
) -> Dict[str, object]:
    """Register each algorithm; return ``{name: algorithm object}``.

    An algorithm this package already registered in this process is kept as
    it is (the loader is idempotent); one registered by somebody else is an
    error.
    """
    from sglang.srt.speculative import spec_registry
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    register = getattr(SpeculativeAlgorithm, "register", None) or spec_registry.register_algorithm
    done: List[str] = []
    result: Dict[str, object] = {}
    try:
        for offered, policy in entries:
            existing = registered(offered.name)
            if existing is not None:
                if not isinstance(existing, _PolicyMethods):
                    raise EngineError(
                        f"algorithm {offered.name} (plugin {offered.plugin!r}) is already registered in "
                        f"SGLang {probe.version} by someone else: {existing!r}"
                    )
                result[offered.name] = existing
                continue
            try:
                register(
                    offered.name,
                    supports_overlap=offered.spec.supports_overlap,
                    validate_server_args=_checked_on_first_call(offered, policy, probe.version),
                    spec_class=spec_class_for(policy, probe, offered.spec.verify_shape, offered.spec.capabilities,
                                              offered.spec.draft_model),
                )(offered.spec.worker_factory)
            except (TypeError, ValueError) as exc:
                raise EngineError(
                    f"SGLang {probe.version} refused algorithm {offered.name} (plugin {offered.plugin!r}): {exc}"
                ) from exc
            for name in unasked_capabilities(offered.spec.capabilities, probe):
                # a detail (DEBUG): a plugin written for every release declares what older ones never ask
                logger.debug("sglang-spec-plugins: algorithm %s (plugin %s) declares %s, which SGLang %s does not ask "
                               "(SGLang %s+): it has no effect", offered.name, printable(offered.plugin), name, probe.version,
                               CAPABILITIES[name].since)
            done.append(offered.name)
            result[offered.name] = registered(offered.name)
    except BaseException:
        unregister(done)
        raise
    return result


def unregister(names: Iterable[str]) -> None:
    """Remove algorithms from SGLang's registry (SGLang has no API for it)."""
    from sglang.srt.speculative import spec_registry

    for name in names:
        spec_registry._REGISTRY.pop(name.upper(), None)


def _checked_on_first_call(offered: OfferedAlgorithm, policy: VerifyPolicy, version: str):
    """:func:`.startup_check.validator` for ``offered``, built (and its module
    imported) at the first call: SGLang checks the arguments where it resolves
    them, and a process that checks none (a scheduler, the detokenizer) does
    not import the check."""
    check = None

    def validate_server_args(server_args) -> None:
        nonlocal check
        if check is None:
            from .startup_check import validator

            check = validator(offered, policy, version)
        check(server_args)

    return validate_server_args
