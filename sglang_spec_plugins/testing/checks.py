"""The conformance checks, without pytest: each raises :class:`Finding` with a
message that reads like a review comment (plugin, algorithm, hook, arguments,
what to change).

Answers are always obtained through the framework's own policy
(:class:`~sglang_spec_plugins.policy.VerifyPolicy`), so a drafter is held to
exactly the rules SGLang will apply to it; the kit adds what the policy cannot
see from one process: fresh policies and fresh processes must agree, and
SGLang itself (see :mod:`sglang_spec_plugins.testing.on_sglang`) must give
the same answers through its own code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import config as config_mod
from .. import ndt_grid
from ..agreement import AGREEMENT_ENV
from ..answers import FreshProcessFailed, in_fresh_process
from ..answers import table as answer_table
from ..errors import PluginError, SpecPluginError, show
from ..plugin_calls import describe_exception
from ..plugins import ALLOW_ENV, OfferedAlgorithm, PluginSet, discover
from ..policy import VerifyPolicy

class Finding(AssertionError):
    """A conformance failure; ``str()`` is the review comment."""


def load(plugin: str, config_path: Optional[Path]) -> PluginSet:
    """Discover only ``plugin`` (the entry-point name), with plugins.toml
    settings from ``config_path`` if given; a load failure is a Finding."""
    try:
        config = config_mod.load(config_path) if config_path else config_mod.Config()
        return discover(config, environ={ALLOW_ENV: plugin})
    except SpecPluginError as exc:
        raise Finding(f"plugin {plugin!r} does not load: {exc}") from exc


def algorithms_of(plugin_set: PluginSet, plugin: str) -> Dict[str, OfferedAlgorithm]:
    """The enabled algorithms ``plugin`` owns (a plugin offering none is a Finding)."""
    owned = {name: a for name, a in plugin_set.algorithms.items() if a.plugin == plugin}
    if not owned:
        raise Finding(f"plugin {plugin!r} offers no enabled algorithm: sgl_spec_algorithms() should return at least one "
                      f"AlgorithmSpec (and plugins.toml must not disable it)")
    return owned


server_args = ndt_grid.validator_args


def accepted_ndts(plugin_set: PluginSet, offered: OfferedAlgorithm, configured: Sequence[int] = (),
                  make_args=server_args) -> Tuple[int, ...]:
    """The ndts ``validate_server_args`` accepts among :func:`ndt_grid.grid`
    (1-64, and the ``configured`` ones the author names), ``policy_for`` answering
    it with a policy of ``plugin_set`` as in a server. It may refuse with
    ValueError (SGLang's way to refuse a configuration); anything else it
    raises is a Finding, and so is refusing the whole grid."""
    from ..engine.algorithm import checking

    tried = ndt_grid.grid(offered, configured)

    def other(ndt: int, exc: BaseException) -> None:
        raise Finding(
            f"plugin {offered.plugin!r}, algorithm {offered.name}: validate_server_args(server_args with "
            f"speculative_num_draft_tokens={ndt}) raised {type(exc).__name__}: {exc}; SGLang expects None "
            "or a ValueError that says what to change"
        ) from exc

    with checking({offered.name: VerifyPolicy(plugin_set, offered)}):
        accepted = ndt_grid.accepted(offered, tried, make_args, other)
    if not accepted:
        raise Finding(f"plugin {offered.plugin!r}, algorithm {offered.name}: validate_server_args refuses every "
                      f"speculative_num_draft_tokens in {tried}; the kit cannot ask for a width")
    return accepted


def answers(plugin_set: PluginSet, offered: OfferedAlgorithm, ndts) -> Dict[str, Any]:
    """Every answer SGLang asks for (:func:`~sglang_spec_plugins.answers.table`),
    through a fresh policy. A rejected answer is a Finding carrying the policy's message."""
    try:
        return answer_table(VerifyPolicy(plugin_set, offered), ndts)
    except (SpecPluginError, ValueError) as exc:
        raise Finding(str(exc)) from exc


def same_answers(first: Dict[str, Any], second: Dict[str, Any], offered: OfferedAlgorithm, how: str) -> None:
    """Two answer tables must be equal; the first difference is a Finding."""
    rows = [("sgl_spec_draft_may_verify()", first["draft_may_verify"], second["draft_may_verify"])]
    rows += [(f"the answers at num_draft_tokens={ndt} (max, widths and widths by batch size)", first["widths"].get(ndt),
              second["widths"].get(ndt)) for ndt in first["widths"].keys() | second["widths"].keys()]
    for where, mine, theirs in rows:
        if mine != theirs:
            raise Finding(f"plugin {offered.plugin!r}, algorithm {offered.name}: {where} differ {how}: "
                          f"{mine!r} vs {theirs!r}; answers must be pure (SGLang asks in every "
                          "process and captures CUDA graphs per width)")


def answers_in_fresh_process(plugin: str, config_path: Optional[Path], algorithm: str, ndts, hash_seed: str) -> Dict[str, Any]:
    """:func:`answers` computed by a new Python process (``PYTHONHASHSEED=hash_seed``)."""
    env = dict(os.environ, PYTHONHASHSEED=hash_seed, **{ALLOW_ENV: plugin})
    try:
        report = in_fresh_process(config_path, {algorithm: ndts}, env=env, locate=False)
    except FreshProcessFailed as exc:
        raise Finding(f"plugin {plugin!r}, algorithm {algorithm}: asking in a fresh process {exc}") from None
    if algorithm not in report["tables"]:
        raise Finding(f"plugin {plugin!r}, algorithm {algorithm}: a fresh process does not offer it: "
                      + "; ".join(report["problems"] or ["no problem reported"]))
    return report["tables"][algorithm]


def worker_class(offered: OfferedAlgorithm, ndt: int) -> type:
    """What the factory returns for a start-up SGLang would accept; it must be a class."""
    args = server_args(offered.name, ndt, not offered.spec.supports_overlap)
    try:
        with offered.code("worker_factory(server_args)"):
            made = offered.spec.worker_factory(args)
    except PluginError as exc:
        raise Finding(f"plugin {offered.plugin!r}, algorithm {offered.name}: worker_factory(server_args) raised "
                      f"{describe_exception(exc.__cause__)}") from exc.__cause__
    if not isinstance(made, type):
        raise Finding(f"plugin {offered.plugin!r}, algorithm {offered.name}: worker_factory(server_args) returned "
                      f"{show(made)}; SGLang instantiates what it returns, so it must return the worker class")
    return made


def sglang_importable() -> bool:
    """Whether an SGLang installation is visible to this interpreter."""
    import importlib.util

    return importlib.util.find_spec("sglang") is not None


def on_sglang(plugin: str, config_path: Optional[Path], ndts_by_algorithm: Tuple[Tuple[str, Tuple[int, ...]], ...],
              sections: Tuple[str, ...]) -> Dict[str, Any]:
    """Run :mod:`.on_sglang` for ``plugin`` and ``sections`` in a fresh process
    and return its report."""
    env = dict(os.environ, SGLANG_SPEC_PLUGINS=plugin)
    env.pop("SGLANG_PLUGINS", None)
    env.pop(AGREEMENT_ENV, None)  # a server's agreement the environment names is that server's, not this check's
    if config_path:
        env["SGLANG_SPEC_PLUGINS_CONFIG"] = str(config_path)
    request = json.dumps({"plugin": plugin, "ndts": {name: list(ndts) for name, ndts in ndts_by_algorithm},
                          "sections": list(sections)})
    out = subprocess.run([sys.executable, "-m", "sglang_spec_plugins.testing.on_sglang", request],
                         capture_output=True, text=True, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise Finding(f"plugin {plugin!r}: the checks on SGLang could not run (exit {out.returncode}):\n"
                      f"{(out.stderr or out.stdout)[-3000:]}")
    return json.loads(lines[-1])


def report_problems(report: Dict[str, Any], algorithm: str, section: str) -> List[str]:
    """The problems ``section`` of an :func:`on_sglang` report lists for ``algorithm``."""
    if report.get("error"):
        return [report["error"]]
    found = report["algorithms"].get(algorithm, {})
    if section not in found:
        return list(found.get("registry", {}).get("problems", [])) or [f"the run on SGLang {report.get('release')} "
                                                                       f"reported nothing on {section}"]
    return list(found[section]["problems"])
