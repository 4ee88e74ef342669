"""The algorithm object SGLang sees for a plugin algorithm.

:func:`spec_class_for` returns a subclass of SGLang's ``CustomSpecAlgo`` bound
to one :class:`~sglang_spec_plugins.policy.VerifyPolicy`. It answers
SGLang's target-verify questions from the policy's cache under every name a
supported release calls, and carries every public method of the built-in
``SpeculativeAlgorithm`` enum that the installed ``CustomSpecAlgo`` lacks:
those are taken from the enum itself, where they dispatch on ``is_*()``
predicates that are all False for a plugin algorithm, which yields the
neutral answer (no topk, no draft hidden states, a plain FutureMap, ...).
"""

from __future__ import annotations

import contextlib
import functools
from types import MappingProxyType
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

from ..errors import EngineError
from ..policy import VerifyPolicy
from ..verify_layout import CHAIN
from .probe import EngineProbe


def _ndt_of(server_args: Any) -> Optional[int]:
    return getattr(server_args, "speculative_num_draft_tokens", None)


class _PolicyMethods:
    """Methods every plugin algorithm class gets; ``policy``,
    ``verify_shape`` and ``draft_model`` are set per class."""

    policy: VerifyPolicy
    verify_shape: str
    draft_model: Any  # the plugin's DraftModel declaration, or None
    _widths: dict  # the policy's cache, read directly on the hot path

    def get_num_tokens_per_req_for_target_verify(self, num_draft_tokens: int, is_draft_worker: bool) -> int:
        try:
            return self._widths[(num_draft_tokens, is_draft_worker)]
        except KeyError:
            return self.policy.width(num_draft_tokens, is_draft_worker)

    # 0.5.13-0.5.15 call this name; 0.5.16-0.5.20 keep it as an alias.
    get_num_tokens_per_bs_for_target_verify = get_num_tokens_per_req_for_target_verify

    def supports_target_verify_for_draft(self) -> bool:
        return self.policy.draft_may_verify()

    def resolve_max_speculative_num_draft_tokens(self, server_args: Any) -> Optional[int]:
        stock = getattr(super(), "resolve_max_speculative_num_draft_tokens", None)
        ndt = stock(server_args) if stock else _ndt_of(server_args)
        return None if ndt is None else self.policy.max_width(ndt)

    def handle_server_args(self, server_args: Any) -> None:
        stock = getattr(super(), "handle_server_args", None)
        if stock:
            stock(server_args)
        ndt = _ndt_of(server_args)
        if ndt is not None:
            self.policy.validate(ndt)


def draft_model_of(algorithm: Any) -> Any:
    """The :class:`~sglang_spec_plugins.draft_model.DraftModel` a plugin
    algorithm declares; None for any other algorithm or a plugin without one."""
    return algorithm.draft_model if isinstance(algorithm, _PolicyMethods) else None


def policy_of(algorithm: Any) -> Optional[VerifyPolicy]:
    """The policy behind a plugin algorithm; None for any other algorithm
    (built-in enum member, a stock ``CustomSpecAlgo``, None)."""
    return algorithm.policy if isinstance(algorithm, _PolicyMethods) else None


def policy_for(server_args: Any) -> VerifyPolicy:
    """The policy of the plugin algorithm SGLang serves with ``server_args``
    (``--speculative-algorithm``): what a plugin's worker asks for its verify
    width (``policy.width(ndt, is_draft_worker)``, the answer SGLang's runners
    and backends get) and its plugins.toml ``settings``. Imports SGLang;
    EngineError when the algorithm is not a registered plugin algorithm.
    Inside :func:`checking`, its policies answer first (nothing imported)."""
    name = getattr(server_args, "speculative_algorithm", None)
    checked = _checking.get(str(name).upper()) if isinstance(name, str) else None
    if checked is not None:
        return checked
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return required_policy(SpeculativeAlgorithm.from_string(name), f"--speculative-algorithm {name!r}")


_checking: Dict[str, VerifyPolicy] = {}


@contextlib.contextmanager
def checking(policies: Mapping[str, VerifyPolicy]) -> Iterator[None]:
    """While ``check`` or the conformance kit runs a plugin's validator and worker factory
    with server arguments of its own, :func:`policy_for` answers with ``policies`` (by
    algorithm name), as it answers in a server with the registered ones: nothing is registered
    with SGLang."""
    before = dict(_checking)
    _checking.update({name.upper(): policy for name, policy in policies.items()})
    try:
        yield
    finally:
        _checking.clear()
        _checking.update(before)


def required_policy(algorithm: Any, what: str) -> VerifyPolicy:
    """The policy of a plugin ``algorithm``; EngineError naming ``what`` otherwise."""
    policy = policy_of(algorithm)
    if policy is None:
        raise EngineError(f"{what} is not a plugin algorithm registered by sglang-spec-plugins in this process")
    return policy


@functools.lru_cache(maxsize=None)
def plugin_base_class(probe: EngineProbe) -> type:
    """``CustomSpecAlgo`` + :class:`_PolicyMethods` + the enum's missing methods."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    borrowed: Dict[str, Any] = {
        name: vars(SpeculativeAlgorithm)[name]
        for name in probe.enum_only_methods
        if not hasattr(_PolicyMethods, name)
    }
    borrowed["__doc__"] = "A CustomSpecAlgo whose answers come from a sglang-spec-plugins policy."
    return type("PluginSpecAlgo", (_PolicyMethods, CustomSpecAlgo), borrowed)


def spec_class_for(policy: VerifyPolicy, probe: EngineProbe, verify_shape: str = CHAIN,
                   capabilities: Mapping[str, bool] = MappingProxyType({}), draft_model: Any = None) -> type:
    """The class to pass as ``spec_class`` when registering ``policy.algorithm``;
    ``verify_shape``, ``capabilities`` and ``draft_model`` are the plugin's
    declared :class:`AlgorithmSpec` fields. A capability the installed release
    never asks (see :func:`unasked_capabilities`) is left out."""
    base = plugin_base_class(probe)
    answers = {name: _answer(value) for name, value in capabilities.items() if hasattr(base, name)}
    return type(f"PluginSpecAlgo_{policy.algorithm}", (base,),
                {"policy": policy, "_widths": policy.width_cache, "verify_shape": verify_shape,
                 "draft_model": draft_model, **answers})


def unasked_capabilities(capabilities: Mapping[str, bool], probe: EngineProbe) -> Tuple[str, ...]:
    """The declared capabilities the installed SGLang has no question for."""
    base = plugin_base_class(probe)
    return tuple(name for name in capabilities if not hasattr(base, name))


def _answer(value: bool):
    def answer(self) -> bool:
        return value

    return answer
