"""Per-algorithm answers to SGLang's target-verify questions, resolved once.

A :class:`VerifyPolicy` asks the owning plugin (through
:meth:`PluginSet.answers`) for the verify width, the maximum width and
whether the draft worker may verify. The first time an argument tuple is
seen it asks twice (an answer that changes between calls is impure, and
CUDA graphs captured at one width would be replayed at another), validates
the answer and caches it, so the serving hot path is a dict lookup.

Who is blamed: a hook that raises, answers out of range or answers
differently twice is the owning plugin's fault; an answer for another
plugin's algorithm is the answering plugin's fault (unless it offers that
algorithm too, and plugins.toml's ``plugin`` chose the other); a
``max_tokens_per_req`` below ``num_draft_tokens`` is plugins.toml's fault.
Plugin faults raise PluginError naming the plugin and its distribution,
config faults ConfigError naming file, table and key.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Tuple

from . import agreement
from .config import DEFAULT_MAX_FAULTED_STEPS
from .errors import ConfigError, PluginError, is_plain_int, printable, show, type_name
from .plugins import OfferedAlgorithm, PluginSet
from .verify_layout import DRAFT_VERIFIES_CHAINS_ONLY, TREE

if TYPE_CHECKING:  # imported where a table has the key (config), or a hook answers widths by batch size
    from .widths_by_acceptance import AcceptanceSettings
    from .widths_by_batch_size import WidthsByBatchSize, WidthSchedule

logger = logging.getLogger("sglang_spec_plugins")

UNCAPPED_MAX_WIDTH = 64
"""Without ``max_tokens_per_req`` a plugin's maximum width may be at most
``max(num_draft_tokens, UNCAPPED_MAX_WIDTH)``: the maximum sizes KV
reservation and CUDA-graph capture, so anything wider needs the operator's
explicit cap."""

WORKER, CONTROLLER, NOBODY = "worker", "acceptance controller", "nobody"
"""Who chooses a step's width among its bucket's (:meth:`VerifyPolicy.chosen_by`; nobody: the bucket's largest)."""

_PROBE_NDT = 16
"""The ``num_draft_tokens`` at which :meth:`VerifyPolicy.check_others_stay_out`
asks the other plugins (any value would do: their answer must be None for
every argument)."""


class VerifyPolicy:
    """The answers SGLang gets for one plugin algorithm."""

    def __init__(self, plugins: PluginSet, offered: OfferedAlgorithm):
        self.algorithm = offered.name
        self.plugin = offered.plugin
        self.ceiling: Optional[int] = offered.config.max_tokens_per_req
        self.settings: Mapping[str, Any] = offered.config.settings
        self._configured: Optional[WidthsByBatchSize] = offered.config.widths_by_batch_size
        self._acceptance: Optional[AcceptanceSettings] = offered.config.widths_by_acceptance
        self._max_faulted_steps: Optional[int] = offered.config.max_faulted_steps
        self._spec_picks: Any = offered.spec.picks_widths
        self._picks: Optional[bool] = None
        self._plugins = plugins
        self._widths: Dict[Tuple[int, bool], int] = {}
        self._buckets: Dict[Tuple[int, bool], Optional[WidthsByBatchSize]] = {}
        self._max_widths: Dict[int, int] = {}
        self._answers: Dict[str, agreement.Answer] = {}
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
        :meth:`draft_may_verify`. With widths by batch size (:meth:`widths_by_batch_size`)
        this is the largest of them: what SGLang sizes capture buffers and the
        dummy run with (the graphs themselves are captured per bucket). The
        owner's ``sgl_spec_verify_width`` is asked either way and its answer
        must be valid: a plugin checks its own settings there, and with widths
        by batch size none of its other hooks may be asked.
        """
        try:
            return self._widths[(num_draft_tokens, is_draft_worker)]
        except KeyError:
            pass
        ndt = self._check_ndt(num_draft_tokens)
        buckets = self.widths_by_batch_size(ndt, is_draft_worker)
        limit = self.max_width(ndt)
        call = f"sgl_spec_verify_width(num_draft_tokens={ndt}, is_draft_worker={bool(is_draft_worker)})"
        must = f"it must be an int from 1 to the maximum width {limit}"
        answer = self._owner_answer(
            "sgl_spec_verify_width", call, int, must,
            algorithm=self.algorithm, num_draft_tokens=ndt, is_draft_worker=bool(is_draft_worker),
        )
        width = ndt if answer is None else answer
        if not 1 <= width <= limit:
            raise self.fault(f"{call} returned {width!r}; {must}")
        if buckets is not None:
            width = buckets.maximum
        self._agree(call, call, width)
        self._widths[(num_draft_tokens, is_draft_worker)] = width
        logger.debug("sglang-spec-plugins: algorithm %s (plugin %s): %s = %d", self.algorithm, printable(self.plugin),
                    call if buckets is None else f"the largest width by batch size at {call}", width)
        return width

    def widths_by_batch_size(self, num_draft_tokens: int, is_draft_worker: bool) -> Optional[WidthsByBatchSize]:
        """The widths by batch-size bucket, or None for one width at every
        batch size: plugins.toml's ``widths_by_batch_size`` if set, else the
        owner's ``sgl_spec_widths_by_batch_size`` (asked twice, each answer parsed into
        :class:`~.widths_by_batch_size.WidthsByBatchSize` before the two are compared, then
        cached). Every width must be from 1 to :meth:`max_width`."""
        key = (num_draft_tokens, bool(is_draft_worker))
        if key in self._buckets:
            return self._buckets[key]
        ndt = self._check_ndt(num_draft_tokens)
        limit = self.max_width(ndt)
        if self._configured is not None:
            buckets = self._configured
            if buckets.maximum > limit:
                raise ConfigError([
                    f"[algorithms.{self.algorithm}] widths_by_batch_size = {buckets} in {self._plugins.config.origin}: "
                    f"width {buckets.maximum} is above the maximum width {limit} at speculative_num_draft_tokens={ndt}; "
                    "lower it, or raise the maximum (max_tokens_per_req, where the plugin does not answer "
                    "sgl_spec_max_verify_width)"])
        else:
            call = self.widths_by_batch_size_source(ndt, is_draft_worker)  # the hook call
            first, again = (self._buckets_answer(call, ndt, bool(is_draft_worker)) for _ in range(2))
            if first != again:
                raise self.fault(f"{call} answered {first}, then {again} for the same arguments; answers must be pure "
                                  "(SGLang asks in every process and captures CUDA graphs per width)")
            buckets = first
            if buckets is not None and buckets.maximum > limit:
                raise self.fault(f"{call} returned {buckets}; width {buckets.maximum} is above the maximum width {limit}")
        hook = f"sgl_spec_widths_by_batch_size(num_draft_tokens={ndt}, is_draft_worker={bool(is_draft_worker)})"
        self._agree(hook, self.widths_by_batch_size_source(ndt, is_draft_worker),
                    None if buckets is None else buckets.as_plain())
        if buckets is not None:
            logger.debug("sglang-spec-plugins: algorithm %s (plugin %s): widths by batch size at "
                        "num_draft_tokens=%d, is_draft_worker=%s: %s", self.algorithm, printable(self.plugin), ndt,
                        bool(is_draft_worker), buckets)
        self._buckets[key] = buckets
        return buckets

    def widths_by_batch_size_source(self, num_draft_tokens: int, is_draft_worker: bool) -> str:
        """Where :meth:`widths` come from, for messages: the plugins.toml key, or the hook call."""
        if self._configured is not None:
            return f"[algorithms.{self.algorithm}] widths_by_batch_size in {self._plugins.config.origin}"
        return f"sgl_spec_widths_by_batch_size(num_draft_tokens={num_draft_tokens}, is_draft_worker={bool(is_draft_worker)})"

    def _buckets_answer(self, call: str, ndt: int, is_draft_worker: bool) -> Optional[WidthsByBatchSize]:
        """One answer of the owner's ``sgl_spec_widths_by_batch_size`` (None: none, or
        it answered None), parsed: nothing it returns is compared by its own code."""
        answer = self._ask("sgl_spec_widths_by_batch_size", call, dict(algorithm=self.algorithm, num_draft_tokens=ndt,
                                                                 is_draft_worker=is_draft_worker), none_ok=True)
        if answer is None:
            return None
        if isinstance(answer, Mapping):  # its own methods are the plugin's code: read it once, into a plain dict
            with self._plugins.code(self.plugin, f"algorithm {self.algorithm}: reading what {call} returned "
                                                 f"(a {type_name(answer)})"):
                answer = dict(answer.items())
        from .widths_by_batch_size import WidthsByBatchSize, WidthsByBatchSizeError

        try:
            return WidthsByBatchSize.parse(answer)
        except WidthsByBatchSizeError as exc:
            raise self.fault(f"{call} returned {show(answer)}, not widths by batch size: {exc}") from None

    def widths_by_acceptance(self, num_draft_tokens: int, is_draft_worker: bool) -> Optional[AcceptanceSettings]:
        """The acceptance controller's settings for this worker (plugins.toml
        ``widths_by_acceptance``), None when it is off. The controller chooses
        among a bucket's widths: ConfigError when no bucket of the worker's
        widths by batch size gives more than one, or the worker picks its widths
        itself (:meth:`picks_widths`)."""
        if self._acceptance is None:
            return None
        if self.picks_widths():
            raise ConfigError([
                f"[algorithms.{self.algorithm}] widths_by_acceptance in {self._plugins.config.origin}: the worker of "
                f"{self.algorithm} picks each step's width itself (AlgorithmSpec picks_widths of plugin {self.plugin!r}"
                + ("" if isinstance(self._spec_picks, bool) else ", with these settings")
                + "), so the acceptance controller would never choose one; remove widths_by_acceptance"])
        buckets = self.widths_by_batch_size(num_draft_tokens, is_draft_worker)
        if buckets is None or not buckets.chooses:
            given = f"{self.widths_by_batch_size_source(num_draft_tokens, is_draft_worker)} gives {buckets}" if buckets \
                else "no widths_by_batch_size is given (plugins.toml or sgl_spec_widths_by_batch_size)"
            raise ConfigError([
                f"[algorithms.{self.algorithm}] widths_by_acceptance in {self._plugins.config.origin}: the controller "
                f"chooses each step's width among its batch-size bucket's widths, but {given} at "
                f"speculative_num_draft_tokens={num_draft_tokens}; give a bucket a list of widths, e.g. "
                "widths_by_batch_size = {1 = [1, 2, 4, 8]}"])
        return self._acceptance

    def picks_widths(self) -> bool:
        """Whether the worker picks each decode step's width itself (``AlgorithmSpec.picks_widths``,
        a function of the settings asked once, as the owner's code)."""
        if self._picks is None:
            answer = self._spec_picks
            if not isinstance(answer, bool):
                call = "AlgorithmSpec picks_widths(settings)"
                with self._plugins.code(self.plugin, f"algorithm {self.algorithm}: {call}"):
                    answer = answer(self.settings)
                self._check_kind(call, answer, bool, "it must be True or False")
            self._picks = answer
        return self._picks

    def chosen_by(self, num_draft_tokens: int, is_draft_worker: bool) -> Optional[str]:
        """Who chooses each step's width among its bucket's, where a bucket of this worker's widths
        by batch size gives several (None where none does): :data:`WORKER` (:meth:`picks_widths`),
        :data:`CONTROLLER` (``widths_by_acceptance``) or :data:`NOBODY` (the bucket's largest)."""
        buckets = self.widths_by_batch_size(num_draft_tokens, is_draft_worker)
        if buckets is None or not buckets.chooses:
            return None
        if self.picks_widths():
            return WORKER
        return CONTROLLER if self.widths_by_acceptance(num_draft_tokens, is_draft_worker) is not None else NOBODY

    def candidate_widths(self, num_draft_tokens: int, is_draft_worker: bool) -> Tuple[int, ...]:
        """Every width a TARGET_VERIFY step of this worker may use (the declared widths), ascending."""
        buckets = self.widths_by_batch_size(num_draft_tokens, is_draft_worker)
        return buckets.candidates if buckets else (self.width(num_draft_tokens, is_draft_worker),)

    def schedule(self, num_draft_tokens: int, is_draft_worker: bool, capture_sizes=None,
                 hold_steps: int = 0) -> Optional[WidthSchedule]:
        """A worker's per-step width chooser (:class:`~.widths_by_batch_size.WidthSchedule`)
        for the batch sizes SGLang captured graphs for (``capture_sizes``; None
        when eager); None when the algorithm has one width at every batch size."""
        from .widths_by_batch_size import WidthSchedule

        buckets = self.widths_by_batch_size(num_draft_tokens, is_draft_worker)
        return None if buckets is None else WidthSchedule(buckets, capture_sizes, hold_steps)

    def max_width(self, num_draft_tokens: int) -> int:
        """The largest width this algorithm may use at this ndt (sizes KV and graphs)."""
        try:
            return self._max_widths[num_draft_tokens]
        except KeyError:
            pass
        ndt = self._check_ndt(num_draft_tokens)
        where = f"[algorithms.{self.algorithm}] max_tokens_per_req = {self.ceiling} in {self._plugins.config.origin}"
        if self.ceiling is not None and self.ceiling < ndt:
            raise ConfigError([f"{where} is below speculative_num_draft_tokens={ndt}; raise it to at least {ndt}"])
        call = f"sgl_spec_max_verify_width(num_draft_tokens={ndt})"
        must = f"the maximum width must be an int >= num_draft_tokens={ndt}"
        answer = self._owner_answer("sgl_spec_max_verify_width", call, int, must, algorithm=self.algorithm, num_draft_tokens=ndt)
        if answer is None:
            answer = self.ceiling if self.ceiling is not None else ndt
        elif answer < ndt:
            raise self.fault(f"{call} returned {answer!r}; {must}")
        elif self.ceiling is not None and answer > self.ceiling:
            raise self.fault(f"{call} returned {answer}, above {where}")
        elif self.ceiling is None and answer > max(ndt, UNCAPPED_MAX_WIDTH):
            raise self.fault(
                f"{call} returned {answer}, above {max(ndt, UNCAPPED_MAX_WIDTH)}, the most allowed without a cap; "
                f"an operator allows it with [algorithms.{self.algorithm}] max_tokens_per_req in {self._plugins.config.origin}"
            )
        self._agree(call, call, answer)
        self._max_widths[num_draft_tokens] = answer
        return answer

    def draft_may_verify(self) -> bool:
        """Whether the drafter's own worker may run TARGET_VERIFY."""
        if self._draft_may_verify is None:
            call = "sgl_spec_draft_may_verify()"
            answer = self._owner_answer("sgl_spec_draft_may_verify", call, bool, "it must be a bool", algorithm=self.algorithm)
            self._draft_may_verify = bool(answer)
        return self._draft_may_verify

    def validate(self, num_draft_tokens: int) -> None:
        """Resolve every answer SGLang will ask for at this ndt: the maximum and
        the width for the target and for the draft worker (SGLang asks for the
        draft worker's width to size its buffers even when it never verifies).
        Raises on the first bad one."""
        self.width(num_draft_tokens, False)
        self.width(num_draft_tokens, True)
        self.widths_by_batch_size(num_draft_tokens, False)
        self.widths_by_batch_size(num_draft_tokens, True)
        self.widths_by_acceptance(num_draft_tokens, False)
        if self.draft_may_verify():
            self.widths_by_acceptance(num_draft_tokens, True)

    def check_others_stay_out(self) -> None:
        """Ask every other plugin each per-algorithm hook for this algorithm;
        any answer but None, or an exception, is that plugin's fault."""
        for hook, args in (
            ("sgl_spec_draft_may_verify", {}),
            ("sgl_spec_max_verify_width", {"num_draft_tokens": _PROBE_NDT}),
            ("sgl_spec_verify_width", {"num_draft_tokens": _PROBE_NDT, "is_draft_worker": False}),
            ("sgl_spec_verify_width", {"num_draft_tokens": _PROBE_NDT, "is_draft_worker": True}),
            ("sgl_spec_widths_by_batch_size", {"num_draft_tokens": _PROBE_NDT, "is_draft_worker": False}),
            ("sgl_spec_widths_by_batch_size", {"num_draft_tokens": _PROBE_NDT, "is_draft_worker": True}),
        ):
            call = f"{hook}(algorithm={self.algorithm!r}" + "".join(f", {k}={v!r}" for k, v in args.items()) + ")"
            answers = self._plugins.answers(hook, exclude=self.plugin, call=call, algorithm=self.algorithm, settings=self.settings, **args)
            self._refuse_intruders(hook, answers)

    @property
    def answers(self) -> Tuple[agreement.Answer, ...]:
        """Every answer that shapes a step resolved so far (maximum widths,
        widths, widths by batch size), as the server's processes compare them."""
        return tuple(self._answers.values())

    def _agree(self, hook_call: str, source: str, value: Any) -> None:
        """Keep the answer ``hook_call`` resolved to ``value`` (as JSON; ``source``:
        where messages say it comes from) and agree on it with the server's other
        processes (:func:`~.agreement.agree`)."""
        answer = agreement.Answer(f"{self.algorithm}: {hook_call}", value,
                                  f"algorithm {self.algorithm} (plugin {self.plugin!r}): {source}")
        agreement.agree(answer)
        self._answers[answer.key] = answer

    def _check_ndt(self, num_draft_tokens: Any) -> int:
        if not is_plain_int(num_draft_tokens) or num_draft_tokens < 1:
            raise ValueError(f"algorithm {self.algorithm}: speculative_num_draft_tokens must be a positive int, got {num_draft_tokens!r}")
        return num_draft_tokens

    @property
    def max_faulted_steps(self) -> int:
        """Decode steps in which the drafter may fault before its worker switches it off
        (plugins.toml ``max_faulted_steps``, else :data:`~.config.DEFAULT_MAX_FAULTED_STEPS`)."""
        return DEFAULT_MAX_FAULTED_STEPS if self._max_faulted_steps is None else self._max_faulted_steps

    def fault(self, message: str) -> PluginError:
        """A PluginError blaming the owner, naming the algorithm."""
        return self._plugins.error(self.plugin, f"algorithm {self.algorithm}: {message}")

    def _owner_answer(self, hook_name: str, call: str, kind: type, must: str, **kwargs: Any) -> Any:
        """The owner's answer (None: it has no implementation), asked twice.

        Each answer must be None or exactly of type ``kind`` (``must`` says
        what else is required) before the two are compared: a NaN, an array
        or an object with its own ``__eq__`` is refused as what it is, not as
        impure, and nothing a plugin returns is compared by its own code."""
        first = self._ask(hook_name, call, kwargs)
        self._check_kind(call, first, kind, must)
        again = self._ask(hook_name, call, kwargs)
        self._check_kind(call, again, kind, must)
        if first != again:
            raise self.fault(f"{call} answered {first!r}, then {again!r} for the same arguments; answers must be pure "
                              "(SGLang asks in every process and captures CUDA graphs per width)")
        return first

    def _check_kind(self, call: str, answer: Any, kind: type, must: str) -> None:
        if answer is not None and type(answer) is not kind:
            raise self.fault(f"{call} returned {show(answer)}, a {type_name(answer)}, not {'an' if kind is int else 'a'} "
                              f"{kind.__name__}; {must}")

    def _ask(self, hook_name: str, call: str, kwargs: Mapping[str, Any], none_ok: bool = False) -> Any:
        answers = self._plugins.answers(hook_name, call=f"algorithm {self.algorithm}: {call}", settings=self.settings, **kwargs)
        self._refuse_intruders(hook_name, answers)
        if not none_ok and self.plugin in answers and answers[self.plugin] is None:
            imported = self._plugins.imported_hook(self.plugin, hook_name)
            if imported is not None:
                raise self.fault(f"{call} returned None for its own algorithm {self.algorithm}: {_imported(hook_name, imported)}")
            raise self.fault(
                f"{call} returned None for its own algorithm {self.algorithm}; hooks receive the name upper case, "
                f"as SGLang registers it (compare with {self.algorithm!r}), and a plugin implementing a hook answers "
                "it for every algorithm it owns"
            )
        return answers.get(self.plugin)

    def _refuse_intruders(self, hook_name: str, answers: Mapping[str, Any]) -> None:
        """An answer for this algorithm from a plugin that neither owns it nor offers it too is that plugin's
        fault (a plugin that offers it as well answers for its own offer, which plugins.toml left unserved)."""
        offering = self._plugins.offered_by.get(self.algorithm, ())
        intruders = sorted(p for p, a in answers.items() if p != self.plugin and a is not None and p not in offering)
        if intruders:
            imported = self._plugins.imported_hook(intruders[0], hook_name)
            raise self._plugins.error(
                intruders[0],
                f"{hook_name} answered {answers[intruders[0]]!r} for algorithm {self.algorithm}, which plugin "
                f"{self.plugin!r} owns; " + ("return None for algorithms you do not own" if imported is None
                                             else _imported(hook_name, imported)),
            )



def _imported(hook_name: str, imported: Tuple[str, str]) -> str:
    """What a message says of a hook another package defines (:meth:`~.plugins.PluginSet.imported_hook`)."""
    where, module = imported
    return (f"this {hook_name} is {where}, which {module} imports (a `from ... import *` brings in every hook of the "
            f"module it names), and it answers for that module's algorithms; define {hook_name} in {module} for its "
            "own algorithms, or import only the names it uses")


def build_policies(plugin_set: PluginSet, *, tolerate: bool) -> Tuple[PluginSet, Dict[str, VerifyPolicy]]:
    """One policy per enabled algorithm, with every answer that needs no
    ``num_draft_tokens`` checked now, and every plugin checked to stay out of
    algorithms it does not own.

    A fault is charged to the plugin that caused it. With ``tolerate``
    (``on_error = "skip"``, or ``check`` collecting every problem) that
    plugin is dropped whole, all its algorithms with it, and the rest is
    checked again; otherwise the PluginError is raised.
    """
    while True:
        policies = {name: VerifyPolicy(plugin_set, offered) for name, offered in plugin_set.algorithms.items()}
        try:
            for name, policy in policies.items():
                if policy.draft_may_verify() and plugin_set.algorithms[name].spec.verify_shape == TREE:
                    raise policy.fault(f"verify_shape='tree' and sgl_spec_draft_may_verify() returned True, but "
                                        f"{DRAFT_VERIFIES_CHAINS_ONLY}")
                policy.check_others_stay_out()
            return plugin_set, policies
        except PluginError as exc:
            if not tolerate or exc.plugin not in {p.name for p in plugin_set.plugins}:
                raise
            plugin_set = plugin_set.without(exc)
