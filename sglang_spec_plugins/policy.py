"""Per-algorithm answers to SGLang's target-verify questions, resolved once.

A :class:`VerifyPolicy` asks the owning plugin (through
:meth:`PluginSet.answers`) for the verify width, the maximum width and
whether the draft worker may verify; it validates each answer the first time
an argument tuple is seen and caches it, so the serving hot path is a dict
lookup. Every rejected answer raises PluginError naming the plugin.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from .errors import PluginError
from .plugins import OfferedAlgorithm, PluginSet


class VerifyPolicy:
    """The answers SGLang gets for one plugin algorithm."""

    def __init__(self, plugins: PluginSet, offered: OfferedAlgorithm):
        self.algorithm = offered.name
        self.plugin = offered.plugin
        self.ceiling: Optional[int] = offered.config.max_tokens_per_req
        self.settings: Mapping[str, Any] = offered.config.settings
        self._plugins = plugins
        self._widths: Dict[Tuple[int, bool], int] = {}
        self._max_widths: Dict[int, int] = {}
        self._draft_may_verify: Optional[bool] = None

    def __repr__(self) -> str:
        return f"VerifyPolicy({self.algorithm!r}, plugin={self.plugin!r})"

    @property
    def width_cache(self) -> Dict[Tuple[int, bool], int]:
        """The validated widths so far, keyed by (num_draft_tokens, is_draft_worker).
        Read-only for callers; only :meth:`width` adds to it."""
        return self._widths

    def width(self, num_draft_tokens: int, is_draft_worker: bool) -> int:
        """Tokens per request in TARGET_VERIFY (cached after the first call).

        SGLang also asks on behalf of draft workers that never verify (to size
        buffers); whether one may run TARGET_VERIFY is SGLang's check, fed by
        :meth:`draft_may_verify`.
        """
        try:
            return self._widths[(num_draft_tokens, is_draft_worker)]
        except KeyError:
            pass
        ndt = self._check_ndt(num_draft_tokens)
        answer = self._owner_answer(
            "sgl_spec_verify_width",
            algorithm=self.algorithm,
            num_draft_tokens=ndt,
            is_draft_worker=bool(is_draft_worker),
        )
        width = ndt if answer is None else answer
        limit = self.max_width(ndt)
        if not _is_int(width) or not 1 <= width <= limit:
            raise PluginError(
                self.plugin,
                f"algorithm {self.algorithm}: sgl_spec_verify_width(num_draft_tokens={ndt}, is_draft_worker={bool(is_draft_worker)}) "
                f"returned {width!r}; it must be an int from 1 to the maximum width {limit}",
            )
        self._widths[(num_draft_tokens, is_draft_worker)] = width
        return width

    def max_width(self, num_draft_tokens: int) -> int:
        """The largest width this algorithm may use at this ndt (sizes KV and graphs)."""
        try:
            return self._max_widths[num_draft_tokens]
        except KeyError:
            pass
        ndt = self._check_ndt(num_draft_tokens)
        answer = self._owner_answer(
            "sgl_spec_max_verify_width", algorithm=self.algorithm, num_draft_tokens=ndt
        )
        if answer is None:
            answer = self.ceiling if self.ceiling is not None else ndt
            source = "plugins.toml max_tokens_per_req" if self.ceiling is not None else "num_draft_tokens"
        else:
            source = "sgl_spec_max_verify_width"
        if not _is_int(answer) or answer < ndt:
            raise PluginError(self.plugin, f"algorithm {self.algorithm}: maximum width {answer!r} (from {source}) must be an int >= num_draft_tokens={ndt}")
        if self.ceiling is not None and answer > self.ceiling:
            raise PluginError(
                self.plugin,
                f"algorithm {self.algorithm}: sgl_spec_max_verify_width returned {answer}, above "
                f"[algorithms.{self.algorithm}] max_tokens_per_req = {self.ceiling} in {self._plugins.config.origin}",
            )
        self._max_widths[num_draft_tokens] = answer
        return answer

    def draft_may_verify(self) -> bool:
        """Whether the drafter's own worker may run TARGET_VERIFY."""
        if self._draft_may_verify is None:
            answer = self._owner_answer("sgl_spec_draft_may_verify", algorithm=self.algorithm)
            if answer is not None and not isinstance(answer, bool):
                raise PluginError(self.plugin, f"algorithm {self.algorithm}: sgl_spec_draft_may_verify returned {answer!r}; it must be a bool")
            self._draft_may_verify = bool(answer)
        return self._draft_may_verify

    def validate(self, num_draft_tokens: int) -> None:
        """Resolve every answer SGLang will ask for at this ndt; raises on the first bad one."""
        self.width(num_draft_tokens, False)
        if self.draft_may_verify():
            self.width(num_draft_tokens, True)

    def _check_ndt(self, num_draft_tokens: Any) -> int:
        if not _is_int(num_draft_tokens) or num_draft_tokens < 1:
            raise ValueError(f"algorithm {self.algorithm}: speculative_num_draft_tokens must be a positive int, got {num_draft_tokens!r}")
        return num_draft_tokens

    def _owner_answer(self, hook_name: str, **kwargs: Any) -> Any:
        answers = self._plugins.answers(hook_name, settings=self.settings, **kwargs)
        intruders = sorted(p for p in answers if p != self.plugin)
        if intruders:
            raise PluginError(intruders[0], f"{hook_name} answered for algorithm {self.algorithm}, which plugin {self.plugin!r} owns; return None for algorithms you do not own")
        return answers.get(self.plugin)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
