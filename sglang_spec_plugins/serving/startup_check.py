"""What SGLang would meet late, found while it resolves its server arguments.

SGLang's scheduler calls an algorithm's ``create_worker`` (the overlap rule,
the worker factory) only after the target model's weights are loaded, and
builds the attention backends after that; a worker class that does not fit
the release, a factory that returns an instance or raises, a missing
``--disable-overlap-schedule`` or a refused attention backend would be found
there, on a GPU, minutes into start-up. The earliest per-algorithm point
SGLang offers is the ``validate_server_args`` it calls while it resolves its
server arguments, before any process loads weights: from
``ServerArgs.__post_init__`` on 0.5.12.x and from
``arg_groups/speculative_hook.handle_speculative_decoding`` on 0.5.13-0.5.23
(0.5.23 hands it a recording view of the arguments). (``handle_server_args``
comes later and is never called on 0.5.12-0.5.13.)

The loader registers :func:`validator` there for every plugin algorithm: it
runs the plugin's own validator and then :func:`faults`, and stops SGLang
with a :class:`PluginError` naming plugin, distribution, algorithm and hook,
or logs one INFO line with the widths it resolved (:func:`widths_line`).
``check`` asks the same :func:`faults` (:mod:`.prediction`), so what
``check`` finds the server finds before the weights load.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, List, Mapping, Optional, Sequence

from ..engine.facts import DRAFT, TARGET, dp_attention, draft_backend, verify_backends
from ..errors import BEFORE_WEIGHTS, ConfigError, PluginError, PluginInterrupted, StartupRefused, printable, show
from ..plugins import OfferedAlgorithm
from ..policy import VerifyPolicy

logger = logging.getLogger("sglang_spec_plugins")


def faults(offered: OfferedAlgorithm, policy: VerifyPolicy, server_args: Any, version: str, *,
           ndt: Optional[int], disable_overlap: bool, backends: Mapping[str, str], release: Any = None,
           validate: bool = True, factory: bool = True, dp_attention: bool = False,
           draft_config: bool = True, capture_sizes: Optional[Sequence[int]] = None,
           model_path: Optional[str] = None) -> List[str]:
    """Everything SGLang would refuse about this algorithm with these
    arguments, one line each, without the plugin's name, in SGLang's order:
    the plugin's ``validate_server_args`` (any exception, ``AssertionError``
    included; SGLang stops there), the overlap rule, the worker factory's
    result against the release's worker contract, widths by batch size with
    DP attention (``dp_attention``: :func:`~..engine.facts.dp_attention`), a draft model
    and the DFLASH-only sites it meets (:mod:`.draft_model_check`), and the attention
    ``backends`` (worker -> ``--attention-backend`` name) at the plugin's
    widths at ``ndt`` (those ``policy`` has resolved: resolving them is the
    caller's step, since a width fault is a PluginError of its own), and
    flashinfer's workspace for the verify graphs at the batch sizes
    ``server_args`` lists, or ``capture_sizes``, for the target at
    ``model_path`` or ``server_args``' (:mod:`.workspace_check`).
    ``validate``/``factory``/``draft_config`` False skip the validator/the
    factory/the draft checkpoint (``check`` without arguments to hand them). Raises nothing a plugin causes but an
    interrupt (:class:`~..errors.PluginInterrupted`)."""
    from ..engine.worker_contract import contract
    from .draft_model_check import draft_model_faults  # imported when a server's arguments are checked, not at load
    from .workspace_check import workspace_faults

    release = release or contract()
    refused = validator_fault(offered, server_args, ndt) if validate else None
    if refused:
        return [refused]
    found = overlap_faults(offered, version, disable_overlap, release)
    if factory:
        found += factory_faults(offered, server_args, release, policy, ndt)
    if dp_attention:
        found += dp_attention_faults(policy, ndt)
    if offered.spec.draft_model is not None:
        found += draft_model_faults(offered, policy, server_args, version, ndt, draft_config)
    found += backend_faults(offered, policy, version, ndt, backends)
    if False in verifying_workers(policy, ndt):
        found += workspace_faults(policy, server_args, version, ndt, backends, capture_sizes, model_path=model_path)
    return found


def validator_fault(offered: OfferedAlgorithm, server_args: Any, ndt: Optional[int]) -> Optional[str]:
    """What the plugin's own ``validate_server_args`` raised (SGLang stops on any
    exception from it), or what it returned other than None (SGLang ignores
    that, so a ``False`` meant as a refusal would let the server start); None
    when it accepts."""
    validate = offered.spec.validate_server_args
    if validate is None:
        return None
    try:
        with offered.code("validate_server_args", failed=f"validate_server_args refused --speculative-num-draft-tokens {ndt}:"):
            answer = validate(server_args)
    except PluginInterrupted:
        raise
    except PluginError as exc:
        return exc.detail
    if answer is not None:
        return (f"validate_server_args returned {show(answer)}; SGLang ignores what a validator returns: return None to "
                "accept the arguments, or raise ValueError saying what to change")
    return None


def overlap_faults(offered: OfferedAlgorithm, version: str, disable_overlap: bool, release: Any) -> List[str]:
    """SGLang's ``create_worker`` refusal of ``supports_overlap=False`` without the flag (read off the release)."""
    from ..engine.worker_contract import overlap_flag_needed

    flag = overlap_flag_needed(offered.spec.supports_overlap, release)
    if flag and not disable_overlap:
        return [f"supports_overlap=False: SGLang {version} refuses to start it without {flag}"]
    return []


def factory_faults(offered: OfferedAlgorithm, server_args: Any, release: Any, policy: Optional[VerifyPolicy] = None,
                   ndt: Optional[int] = None) -> List[str]:
    """What SGLang's ``create_worker`` and scheduler would meet in the worker factory's result,
    and (with ``policy`` and ``ndt``) the widths at ``ndt`` the class would not serve
    (:func:`one_width_faults`)."""
    from ..engine.worker_base import verifies_one_width
    from ..engine.worker_contract import check_worker

    try:
        with offered.code("worker_factory", failed="worker_factory raised"):
            worker = offered.spec.worker_factory(server_args)
        with offered.code("worker_factory", failed="reading the class worker_factory returned raised"):
            found = check_worker(worker, release)  # its members, descriptors and signatures are the plugin's code
            one_width = not found and verifies_one_width(worker)
    except PluginInterrupted:
        raise
    except PluginError as exc:
        return [exc.detail]
    return found + (one_width_faults(policy, ndt, worker.__qualname__) if one_width and policy is not None else [])


def one_width_faults(policy: VerifyPolicy, ndt: Optional[int], worker: str) -> List[str]:
    """Widths by batch size that give a worker several widths, for a worker class ``worker``
    that verifies one width at every step (:func:`~..engine.worker_base.verifies_one_width`):
    it would serve the largest at every batch size."""
    found: List[str] = []
    for draft in verifying_workers(policy, ndt):
        buckets = policy.widths_by_batch_size(ndt, draft)
        if buckets is not None and len(buckets.candidates) > 1:
            found.append(f"{policy.widths_by_batch_size_source(ndt, draft)} gives the {DRAFT if draft else TARGET} widths "
                         f"by batch size {buckets}, but {worker} verifies one width at every step (its base's rule, "
                         f"verifies_one_width): it would verify {buckets.maximum} at every batch size; give one width")
    return found


def verifying_workers(policy: VerifyPolicy, ndt: Optional[int]) -> List[bool]:
    """``is_draft_worker`` of each worker that runs TARGET_VERIFY at a width
    ``policy`` has resolved at ``ndt`` (none where its width was refused)."""
    workers = (False, True) if policy.draft_may_verify() else (False,)
    return [draft for draft in workers if ndt is not None and (ndt, draft) in policy.width_cache]


def dp_attention_faults(policy: VerifyPolicy, ndt: Optional[int]) -> List[str]:
    """Widths by batch size are not served with DP attention: SGLang's decode
    CUDA-graph runner pads every DP rank's batch to the largest rank's, so the
    size of one rank's batch does not say which graph (captured at which
    width) the step replays. One width in every bucket is one width, and is served."""
    found: List[str] = []
    for draft in verifying_workers(policy, ndt):
        buckets = policy.widths_by_batch_size(ndt, draft)
        line = (f"{policy.widths_by_batch_size_source(ndt, draft)} gives widths by batch size {buckets}, which are not served "
                "with DP attention (--enable-dp-attention or --attn-dp-size above 1; SGLang pads every DP rank's decode "
                "batch to the largest rank's); use one width (no widths by batch size) or no DP attention")
        if buckets is not None and len(buckets.candidates) > 1 and line not in found:  # plugins.toml's: both workers'
            found.append(line)
    return found


def backend_faults(offered: OfferedAlgorithm, policy: VerifyPolicy, version: str, ndt: Optional[int],
                   backends: Mapping[str, str]) -> List[str]:
    """The named attention backends that refuse the plugin's resolved width at ``ndt``."""
    from ..patches.attention_support import support_at_widths
    from ..patches.support import Serving

    found: List[str] = []
    verifying = verifying_workers(policy, ndt)
    for worker_name, backend in backends.items():
        draft = worker_name == DRAFT
        if draft not in verifying:
            continue  # no width, a draft worker that never verifies, or a width already refused
        shape = offered.spec.verify_shape
        served = draft_backend(backend) if draft else backend
        width, support = support_at_widths(served, policy, ndt, shape, draft)  # every width a step may use
        if support.verdict == Serving.REFUSED:
            named = f"--attention-backend {backend}" + (f" ({fallback_phrase(backend, served, version)})"
                                                          if served != backend else "")
            found.append(f"{named} on the {worker_name} at width {width} ({shape}, ndt {ndt}) on SGLang {version} is "
                         f"refused: {support.reason}")
    return found


def fallback_phrase(named: str, served: str, version: str) -> str:
    """What a message says of a draft worker that SGLang's draft-worker builder gives ``served`` for ``named``."""
    from ..engine.facts import draft_backend_rule

    rule = draft_backend_rule()
    takes = f" (they take {', '.join(rule[0])})" if rule is not None else ""
    return f"SGLang {version}'s draft workers run {served} for it{takes}"


def validator(offered: OfferedAlgorithm, policy: VerifyPolicy, version: str) -> Callable[[Any], None]:
    """The ``validate_server_args`` the loader registers for ``offered``: the
    plugin's validator, the widths at the configured ndt, then the rest of
    :func:`faults` on SGLang's own arguments; one error naming the plugin, its
    distribution and the algorithm lists what it found, said to come before
    any weights. An interrupt of the plugin's code stops the server
    (:class:`~..errors.StartupRefused`, status 130) after logging which code
    it interrupted."""

    announced = set()  # SGLang may resolve the arguments more than once: one line per ndt

    def validate_server_args(server_args: Any) -> None:
        ndt = getattr(server_args, "speculative_num_draft_tokens", None)
        try:
            refused = validator_fault(offered, server_args, ndt)
            if refused is None and ndt is not None:
                policy.validate(ndt)  # a width fault raises its own error
            found = [refused] if refused else faults(
                offered, policy, server_args, version, ndt=ndt, validate=False,
                disable_overlap=bool(getattr(server_args, "disable_overlap_schedule", False)),
                dp_attention=dp_attention(server_args), backends=verify_backends(server_args))
        except PluginInterrupted as exc:
            logger.error("sglang-spec-plugins: %s", exc)
            raise StartupRefused(exc) from exc
        except PluginError as exc:
            raise PluginError(exc.plugin, exc.detail + BEFORE_WEIGHTS, exc.distribution) from exc
        except ConfigError as exc:
            raise ConfigError([problem + BEFORE_WEIGHTS for problem in exc.problems]) from exc
        if found:
            raise policy.fault("; ".join(found) + BEFORE_WEIGHTS)
        if ndt not in announced:
            announced.add(ndt)
            logger.info("%s", widths_line(offered, policy, ndt))

    return validate_server_args


def widths_line(offered: OfferedAlgorithm, policy: VerifyPolicy, ndt: Optional[int]) -> str:
    """The INFO line of a passed start-up check: the widths each worker verifies at ``ndt``."""
    widths = []
    for draft in verifying_workers(policy, ndt):
        buckets = policy.widths_by_batch_size(ndt, draft)
        widths.append(f"the {DRAFT if draft else TARGET} verifies "
                      + (f"widths by batch size {buckets}" if buckets is not None else f"width {policy.width(ndt, draft)}"))
    if ndt is not None and not policy.draft_may_verify():
        widths.append(f"the {DRAFT} does not verify")
    return (f"sglang-spec-plugins: start-up check passed for {offered.name} (plugin {printable(offered.plugin)}) at "
            f"--speculative-num-draft-tokens {ndt}: {'; '.join(widths) or 'no width resolved'}")
