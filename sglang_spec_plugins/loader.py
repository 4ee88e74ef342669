"""The startup sequence, run by SGLang in every one of its processes.

SGLang's ``load_plugins()`` calls :func:`sglang_entry_point` (entry point
``sglang_spec_plugins`` in the group ``sglang.srt.plugins``) in the launcher,
the engine, each scheduler process and, from 0.5.22, the detokenizer and DP
controller. Each process reads the same plugins.toml and environment, so each
reaches the same registration.

Sequence: read plugins.toml -> discover plugins -> build one policy per
enabled algorithm -> probe SGLang -> register the algorithms (all or none).
:func:`load` runs it once per process and returns the same report after.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Dict, Mapping, Optional

from . import __version__
from . import config as config_mod
from .errors import EngineError, PluginError, SpecPluginError, StartupRefused
from .plugins import PluginSet, discover
from .policy import VerifyPolicy

logger = logging.getLogger("sglang_spec_plugins")


@dataclass(frozen=True)
class LoadReport:
    """What :func:`load` did in this process."""

    plugins: PluginSet
    policies: Mapping[str, VerifyPolicy]
    registered: Mapping[str, object]
    sglang_version: Optional[str]
    patches: Mapping[str, object]
    """Patch name -> its :class:`~sglang_spec_plugins.patches.Plan` (empty when nothing was loaded)."""


_report: Optional[LoadReport] = None


def load(environ: Mapping[str, str] = os.environ) -> LoadReport:
    """Run the startup sequence once per process; later calls return the first report.

    Raises ConfigError, PluginError or EngineError; nothing is registered
    when it raises.
    """
    global _report
    if _report is not None:
        return _report
    config = config_mod.load(environ=environ)
    plugin_set = discover(config, environ=environ)
    for failure in plugin_set.failures:
        logger.warning("sglang-spec-plugins: skipped plugin %s (on_error = \"skip\"): %s", failure.plugin, failure.message)
    policies = _policies(plugin_set)
    for info in plugin_set.plugins:
        logger.info("sglang-spec-plugins %s: loaded plugin %s from %s", __version__, info.label, info.module_file)

    registered: Dict[str, object] = {}
    plans: Dict[str, object] = {}
    sglang_version = None
    if policies:
        from .engine.probe import probe
        from .engine.registration import register_all
        from .patches import PATCHES, apply_all, revert_all

        found = probe()
        sglang_version = found.version
        if found.problems():
            raise EngineError("; ".join(found.problems()) + f"; cannot serve {', '.join(policies)}")
        plans = apply_all(PATCHES, found.version)
        try:
            registered = register_all(((plugin_set.algorithms[n], p) for n, p in policies.items()), found)
        except BaseException:
            revert_all(PATCHES)
            raise
        for name, plan in plans.items():
            logger.info("sglang-spec-plugins: patch %s on SGLang %s: %s (%s)", name, sglang_version, plan.verdict, plan.reason)
        for name, policy in policies.items():
            offered = plugin_set.algorithms[name]
            logger.info(
                "sglang-spec-plugins: registered algorithm %s with SGLang %s (plugin %s, overlap=%s, draft-may-verify=%s)",
                name, sglang_version, plugin_set.info(offered.plugin).label,
                offered.spec.supports_overlap, policy.draft_may_verify(),
            )
    else:
        logger.info("sglang-spec-plugins %s: no plugin algorithm enabled; SGLang left unchanged", __version__)
    _report = LoadReport(plugin_set, policies, registered, sglang_version, plans)
    return _report


def _policies(plugin_set: PluginSet) -> Dict[str, VerifyPolicy]:
    """One policy per enabled algorithm, with the answers that need no ndt checked now."""
    policies = {}
    for name, offered in plugin_set.algorithms.items():
        policy = VerifyPolicy(plugin_set, offered)
        try:
            policy.draft_may_verify()
        except PluginError as exc:
            if plugin_set.config.on_error != "skip":
                raise
            logger.warning("sglang-spec-plugins: skipped algorithm %s (on_error = \"skip\"): %s", name, exc)
            continue
        policies[name] = policy
    return policies


def sglang_entry_point() -> None:
    """The ``sglang.srt.plugins`` entry point: load, or stop SGLang.

    Any error becomes :class:`StartupRefused` (a ``SystemExit``), because
    SGLang's ``load_plugins()`` would log and ignore an ordinary exception
    and the server would start without the algorithms it was asked to serve.
    """
    try:
        load()
    except SpecPluginError as exc:
        logger.error("sglang-spec-plugins: %s", exc)
        raise StartupRefused(exc) from exc


def _reset_for_tests() -> None:
    """Forget this process's load and revert its patches (tests only; SGLang's
    registry is not touched)."""
    global _report
    if _report is not None and _report.patches:
        from .patches import PATCHES, revert_all

        revert_all(PATCHES)
    _report = None
