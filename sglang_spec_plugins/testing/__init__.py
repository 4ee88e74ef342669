"""The conformance kit for drafter plugins: an opt-in pytest plugin.

Installing sglang-spec-plugins changes nobody's test runs: this plugin has no
``pytest11`` entry point. A drafter's suite turns it on and names the
plugin(s) to check (entry-point names in the group ``sglang_spec_plugins``)::

    # pyproject.toml
    [tool.pytest.ini_options]
    addopts = "-p sglang_spec_plugins.testing"
    sglang_spec_plugins = ["my_drafter"]
    # sglang_spec_plugins_config = "plugins.toml"   # settings to check with (optional)

or ``pytest -p sglang_spec_plugins.testing --sglang-spec-plugin my_drafter``,
or ``pytest_plugins = ["sglang_spec_plugins.testing"]`` in a root conftest.py.

The kit adds test items ``sglang-spec-plugins::PLUGIN::ALGORITHM::CHECK``.
On any machine (no SGLang needed): the plugin loads and every hookimpl
matches the contract; every answer SGLang will ask for over a grid of
``num_draft_tokens`` (those ``validate_server_args`` accepts) and
``is_draft_worker``, through the framework's own policy (ints from 1 to the
maximum, the maximum from ndt to ``max_tokens_per_req``, the owner answering
for its own algorithm under the upper-case name); the same answers from fresh
policies and fresh processes; ``validate_server_args`` refusing only with
ValueError; the worker factory returning a class. Where SGLang is importable
(each in one fresh process, see :mod:`.on_sglang`): registration with
SGLang's registry and SGLang's answers; SGLang's own ``create_worker`` with
the operator command's flags; the worker class against the installed
release's worker contract; for a drafter with its own draft model, its
worker base, its draft runner's TARGET_VERIFY and the start-up check of a
DFlash draft of its block; TARGET_VERIFY attention at the plugin's widths
through each attention backend the kit has a CPU harness for.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable, Iterator, Optional, Tuple

import pytest

from . import checks
from .checks import Finding

INI_PLUGINS = "sglang_spec_plugins"
INI_CONFIG = "sglang_spec_plugins_config"
INI_NDTS = "sglang_spec_plugins_num_draft_tokens"
ROOT_NAME = "sglang-spec-plugins"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sglang-spec-plugins", "sglang-spec-plugins conformance kit")
    group.addoption("--sglang-spec-plugin", action="append", default=[], metavar="NAME", dest="sglang_spec_plugins",
                    help="entry-point name of a drafter plugin to check (repeatable; overrides the ini option)")
    group.addoption("--sglang-spec-config", default=None, metavar="PATH", dest="sglang_spec_config",
                    help="plugins.toml whose settings the kit checks with")
    parser.addini(INI_PLUGINS, type="linelist", help="entry-point names of the drafter plugins the kit checks")
    group.addoption("--sglang-spec-ndt", action="append", default=[], type=int, metavar="N", dest="sglang_spec_ndts",
                    help="a speculative_num_draft_tokens the kit also asks about (repeatable; overrides the ini option)")
    parser.addini(INI_CONFIG, default="", help="plugins.toml whose settings the kit checks with (relative to the rootdir)")
    parser.addini(INI_NDTS, type="linelist", help="speculative_num_draft_tokens values the kit asks about besides 1-64")


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect, so they apply to the kit's items too
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    names = config.getoption("sglang_spec_plugins") or config.getini(INI_PLUGINS)
    if not names:
        raise pytest.UsageError(
            "sglang_spec_plugins.testing is enabled but names no plugin: set "
            f"`{INI_PLUGINS} = [\"<entry-point name>\"]` in [tool.pytest.ini_options] or pass --sglang-spec-plugin NAME"
        )
    raw = config.getoption("sglang_spec_config") or config.getini(INI_CONFIG)
    config_path = (config.rootpath / raw).resolve() if raw else None
    raw_ndts = config.getoption("sglang_spec_ndts") or config.getini(INI_NDTS)
    try:
        ndts = tuple(int(n) for n in raw_ndts)
    except ValueError:
        raise pytest.UsageError(f"{INI_NDTS} must list integers, got {raw_ndts!r}") from None
    if any(n < 1 for n in ndts):
        raise pytest.UsageError(f"{INI_NDTS}: every speculative_num_draft_tokens is 1 or more, got {list(ndts)}")
    root = Kit.from_parent(session, name=ROOT_NAME, nodeid=ROOT_NAME, plugins=tuple(names), config_path=config_path,
                           ndts=ndts)
    items.extend(root.collect())


class Kit(pytest.Collector):
    """The kit's items for the named plugins."""

    def __init__(self, *, plugins: Tuple[str, ...], config_path: Optional[Path], ndts: Tuple[int, ...] = (), **kw):
        super().__init__(**kw)
        self.plugins = plugins
        self.config_path = config_path
        self.ndts = ndts

    def collect(self) -> Iterator["Check"]:
        for plugin in self.plugins:
            yield from self._plugin_items(plugin)

    def _item(self, name: str, run: Callable[[], None]) -> "Check":
        return Check.from_parent(self, name=name, run=run)

    def _plugin_items(self, plugin: str) -> Iterator["Check"]:
        cfg = self.config_path
        try:
            plugin_set = checks.load(plugin, cfg)
            owned = checks.algorithms_of(plugin_set, plugin)
        except Finding as finding:
            def fail(finding=finding):
                raise finding
            yield self._item(f"{plugin}::loads", fail)
            return
        yield self._item(f"{plugin}::loads", lambda: None)

        @functools.lru_cache(maxsize=None)
        def ndts(name: str) -> Tuple[int, ...]:
            return checks.accepted_ndts(plugin_set, owned[name], self.ndts)

        @functools.lru_cache(maxsize=None)
        def table(name: str):
            return checks.answers(plugin_set, owned[name], ndts(name))

        def answered(*names: str) -> None:
            """Skip a check that needs these algorithms' answers where they are refused (reported there, once)."""
            for name in names:
                for check, step in (("validate_server_args", ndts), ("answers", table)):
                    try:
                        step(name)
                    except Finding:
                        pytest.skip(f"not run: the plugin's answers are refused ({name}::{check})")

        @functools.lru_cache(maxsize=None)
        def report(sections: Tuple[str, ...]):
            """One run on SGLang per plugin and sections in this session (a later session runs its own)."""
            return checks.on_sglang(plugin, cfg, tuple((n, ndts(n)) for n in sorted(owned)), sections)

        def on_sglang(section: str):
            if not checks.sglang_importable():
                pytest.skip("SGLang is not importable here; these checks run where it is")
            answered(*sorted(owned))
            sections = ("attention",) if section == "attention" else ("registry", "start", "worker", "draft_model")  # attention: slow
            return report(sections)

        for name in sorted(owned):
            offered = owned[name]
            prefix = f"{plugin}::{name}"
            yield self._item(f"{prefix}::validate_server_args", functools.partial(ndts, name))
            yield self._item(f"{prefix}::answers", functools.partial(table, name))
            yield self._item(f"{prefix}::pure", functools.partial(_pure, plugin_set, offered, cfg, ndts, table, answered))
            yield self._item(f"{prefix}::worker_factory", functools.partial(_factory, offered, ndts))
            for section in ("registry", "start", "worker", "draft_model", "attention"):
                if section != "draft_model" or offered.spec.draft_model is not None:
                    yield self._item(f"{prefix}::sglang_{section}", functools.partial(_section, on_sglang, offered, section))


def _pure(plugin_set, offered, cfg, ndts, table, answered) -> None:
    answered(offered.name)
    first = table(offered.name)
    checks.same_answers(first, checks.answers(plugin_set, offered, ndts(offered.name)), offered, "between two fresh policies")
    for seed in ("0", "1"):
        other = checks.answers_in_fresh_process(offered.plugin, cfg, offered.name, ndts(offered.name), seed)
        checks.same_answers(first, other, offered, f"between this process and a fresh one (PYTHONHASHSEED={seed})")


def _factory(offered, ndts) -> None:
    if checks.sglang_importable():
        pytest.skip("checked by sglang_start and sglang_worker, where SGLang's create_worker calls the factory")
    try:
        checks.worker_class(offered, ndts(offered.name)[0])
    except Finding as finding:
        missing = getattr(finding.__cause__, "name", None) if isinstance(finding.__cause__, ImportError) else None
        if missing is not None and missing.split(".")[0] == "sglang":
            pytest.skip(f"the worker factory imports SGLang, which is not importable here: {finding.__cause__}")
        raise  # any other ImportError is the factory's own fault: SGLang would meet it too


def _section(on_sglang, offered, section: str) -> None:
    report = on_sglang(section)
    skipped = report.get("algorithms", {}).get(offered.name, {}).get(section, {}).get("not_run")
    if skipped:
        pytest.skip(f"not run: {skipped}")
    problems = checks.report_problems(report, offered.name, section)
    if problems:
        raise Finding("\n".join(f"plugin {offered.plugin!r}, algorithm {offered.name}: {p}" for p in problems))


class Check(pytest.Item):
    """One conformance check; a failure shows the finding, not a traceback."""

    def __init__(self, *, run: Callable[[], object], **kw):
        super().__init__(**kw)
        self.run = run

    def runtest(self) -> None:
        self.run()

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, Finding):
            return f"sglang-spec-plugins conformance, {self.name}:\n{excinfo.value}"
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"{ROOT_NAME}::{self.name}"
