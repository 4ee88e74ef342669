"""The startup sequence, run by SGLang in every one of its processes.

SGLang's ``load_plugins()`` calls :func:`sglang_entry_point` (entry point
``sglang_spec_plugins`` in the group ``sglang.srt.plugins``) in the launcher,
the engine, each scheduler process and, from 0.5.22, the detokenizer and DP
controller. Each process reads the same plugins.toml and environment, so each
reaches the same registration.

Sequence: read plugins.toml -> discover plugins -> build one policy per
enabled algorithm, charging every fault to its plugin -> probe SGLang ->
plan and apply the patches and register the algorithms (all or none) ->
agree on the fingerprint with the server's other processes
(:mod:`sglang_spec_plugins.agreement`; a difference undoes it all and stops)
-> log one INFO line (:func:`_summary`). Every detail (each plugin's file,
each patch's verdict, each registration, the agreement) goes to DEBUG, and
``doctor`` shows them; warnings and errors stay at their levels.
:func:`load` runs it once per process and returns the same report after.
"""

from __future__ import annotations

import logging
import os
from typing import Dict, List, Mapping, MutableMapping, NamedTuple, Optional, Tuple

from . import __version__, agreement
from .errors import SpecPluginError, StartupRefused, printable
from .plugin_calls import package_fault
from .fingerprint import as_json, fingerprint_data
from .fingerprint import digest as digest_of
from .plugins import PluginSet, discover_configured
from .policy import VerifyPolicy, build_policies

logger = logging.getLogger("sglang_spec_plugins")


class LoadReport(NamedTuple):
    """What :func:`load` did in this process."""

    plugins: PluginSet
    policies: Mapping[str, VerifyPolicy]
    registered: Mapping[str, object]
    sglang_version: Optional[str]
    patches: Mapping[str, object]
    """Patch name -> its :class:`~sglang_spec_plugins.patches.Plan` (empty when nothing was loaded)."""
    unserved: Optional[str] = None
    """Why the enabled algorithms were not registered (an SGLang release the
    loader cannot serve), or None."""
    fingerprint: str = ""
    """See :mod:`sglang_spec_plugins.fingerprint`."""


_report: Optional[LoadReport] = None


def load(environ: MutableMapping[str, str] = os.environ) -> LoadReport:
    """Run the startup sequence once per process; later calls return the first report.

    Raises ConfigError, PluginError or EngineError; nothing is registered or
    patched when it raises. On an SGLang release the loader cannot serve
    (outside 0.5.12+, or a shape a patch does not know) it registers and
    patches nothing, logs the reason as an error and returns: SGLang then
    serves its built-in algorithms as it would without this package, and
    refuses a plugin algorithm's name as unknown.
    """
    global _report
    if _report is not None:
        return _report
    plugin_set, policies = resolve(environ)
    for failure in plugin_set.failures:
        logger.warning("sglang-spec-plugins: skipped plugin %s (on_error = \"skip\"): %s", printable(failure.plugin), failure.message)
    for line in plugin_set.shadowed.values():
        logger.warning("sglang-spec-plugins: %s", printable(line))
    for note in plugin_set.notes:
        logger.debug("sglang-spec-plugins: %s", printable(note))
    for info in plugin_set.plugins:
        logger.debug("sglang-spec-plugins %s: loaded plugin %s from %s", __version__, info.label, printable(info.module_file))

    registered: Dict[str, object] = {}
    plans: Dict[str, object] = {}
    sglang_version = None
    unserved = None
    verdicts: List[str] = []  # one per planned patch, for the INFO line
    if policies:
        from .engine.probe import probe
        from .serving.registration import register_all
        from .patches import apply_planned, revert_planned, serving_plans

        found = probe()
        sglang_version = found.version
        plans, reasons = serving_plans(found)
        verdicts = [str(plan.verdict) for plan in plans.values()]
        if reasons:
            unserved = "; ".join(reasons)
            plans = {}
            logger.error("sglang-spec-plugins: not serving %s: %s; nothing registered or patched, built-in algorithms unchanged",
                         ", ".join(policies), unserved)
        else:
            apply_planned(plans, found.version)
            try:
                registered = register_all(((plugin_set.algorithms[n], p) for n, p in policies.items()), found)
            except BaseException:
                revert_planned(plans)
                raise
    try:  # from here on, any failure undoes the registration and the patches
        for name, plan in plans.items():
            logger.debug("sglang-spec-plugins: patch %s on SGLang %s: %s (%s)", name, sglang_version, plan.verdict, plan.reason)
        for name, policy in policies.items():
            if name in registered:
                offered = plugin_set.algorithms[name]
                logger.debug(
                    "sglang-spec-plugins: registered algorithm %s with SGLang %s (plugin %s, overlap=%s, draft-may-verify=%s)",
                    name, sglang_version, plugin_set.info(offered.plugin).label,
                    offered.spec.supports_overlap, policy.draft_may_verify(),
                )
        data = fingerprint_data(plugin_set, policies, sglang_version)
        digest = digest_of(data)
        logger.debug("sglang-spec-plugins: %s", agreement.join(digest, environ, as_json(data)))
    except BaseException:
        if plans:
            from .serving.registration import unregister
            from .patches import revert_planned

            unregister(registered)
            revert_planned(plans)
        raise
    _report = LoadReport(plugin_set, policies, registered, sglang_version, plans, unserved, digest)
    logger.info("%s", _summary(_report, verdicts))
    return _report


def _summary(report: LoadReport, verdicts: List[str]) -> str:
    """The loader's one INFO line: plugins, what was registered, the patch
    verdicts (``verdicts``: one per planned patch) as counts, the fingerprint
    (equal in every process of a server; the agreement is checked, a
    difference stops the process with an error)."""
    plugins = ", ".join(info.label for info in report.plugins.plugins) or "none"
    head = f"sglang-spec-plugins {__version__}: plugins {plugins}"
    if not report.policies:
        return f"{head}; no plugin algorithm enabled, SGLang left unchanged; fingerprint {report.fingerprint}"
    count = lambda verdict: sum(v == verdict for v in verdicts)  # noqa: E731
    if report.registered:
        served = (f"registered {', '.join(report.registered)} with SGLang {report.sglang_version}; patches "
                  f"{count('apply')} applied, {count('not needed')} not needed, {count('refused')} refused")
    else:
        served = (f"nothing registered or patched on SGLang {report.sglang_version} (the error above says why; patches "
                  f"{count('apply')} would apply, {count('not needed')} not needed, {count('refused')} refused)")
    notes = f"; {len(report.plugins.notes)} plugins.toml note(s) at DEBUG" if report.plugins.notes else ""
    return (f"{head}; {served}{notes}; fingerprint {report.fingerprint} "
            "(each detail at DEBUG and in `sglang-spec-plugins doctor`)")


def resolve(environ: Mapping[str, str] = os.environ) -> Tuple[PluginSet, Dict[str, VerifyPolicy]]:
    """The plugins and policies the loader serves: plugins.toml, discovery,
    and one policy per enabled algorithm. With ``on_error = "skip"`` a
    faulty plugin is dropped (listed in ``failures``); otherwise, and for any
    config fault, it raises. ``doctor`` shows exactly this."""
    plugin_set = discover_configured(environ=environ)
    return build_policies(plugin_set, tolerate=plugin_set.config.on_error == "skip")


def sglang_entry_point() -> None:
    """The ``sglang.srt.plugins`` entry point: load, or stop SGLang.

    Any error becomes :class:`StartupRefused` (a ``SystemExit``), because
    SGLang's ``load_plugins()`` would log and ignore an ordinary exception
    and the server would start without the algorithms it was asked to serve.
    """
    _visible_before_logging_is_configured()
    try:
        load()
    except (SpecPluginError, KeyboardInterrupt) as exc:  # an interrupt names the plugin code it stopped, if any
        logger.error("sglang-spec-plugins: %s", exc if str(exc) else "interrupted (KeyboardInterrupt) while loading")
        raise StartupRefused(exc) from exc
    except Exception as exc:  # a bug of ours must not let SGLang start half-loaded either
        logger.exception("sglang-spec-plugins: unexpected error while loading")
        raise StartupRefused(RuntimeError(package_fault(exc))) from exc


def _visible_before_logging_is_configured() -> None:
    """Let the start-up summary reach a real server's log at its default level.

    SGLang runs ``load_plugins()`` before it configures logging, and Python
    drops INFO records that no handler takes. When neither the root logger nor
    ours has a handler, ours gets one: INFO and up to stderr, in SGLang's
    time format, not propagated (so nothing prints twice once SGLang
    configures the root logger). A process that configured logging itself
    keeps its own choice.
    """
    if logging.getLogger().handlers or logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%Y-%m-%d %H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _reset_for_tests() -> None:
    """Forget this process's load and revert its patches (tests only; SGLang's
    registry is not touched)."""
    global _report
    if _report is not None and _report.patches:
        from .patches import revert_planned

        revert_planned(_report.patches)
    agreement._reset_for_tests()
    _report = None
