import importlib
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from dists import make_dist  # noqa: E402

pytest_plugins = ["pytester"]  # the conformance kit's tests run it in an inner pytest session (the `kit` fixture)

NEEDS = "SGLang and torch (the CPU harness: examples/quickstart.sh) and the two example drafters"
"""Why a test marked ``sglang`` is skipped (the markers are registered in pyproject.toml)."""


def _sglang_environment() -> bool:
    import importlib.util
    from importlib import metadata

    plugins = {ep.name for ep in metadata.entry_points(group="sglang_spec_plugins")}
    return all(importlib.util.find_spec(m) is not None for m in ("sglang", "torch")) and {"sbd", "dflash_block"} <= plugins


def pytest_collection_modifyitems(config, items):
    """Tests under on_sglang/ and those marked ``sglang`` need SGLang's environment: skipped, saying so, where
    it is absent (``-m "not sglang"`` leaves them out: the SGLang-free tests)."""
    ready = None
    for item in items:
        if "on_sglang" in item.path.parts:
            item.add_marker(pytest.mark.sglang)
        if item.get_closest_marker("sglang") is not None:
            ready = _sglang_environment() if ready is None else ready
            if not ready:
                item.add_marker(pytest.mark.skip(reason=f"needs {NEEDS}"))


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A fresh site directory on sys.path; ``site.add(...)`` installs a test
    distribution into it (see dists.make_dist)."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv("SGLANG_SPEC_PLUGINS", raising=False)
    monkeypatch.delenv("SGLANG_SPEC_PLUGINS_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)

    class Site:
        path = root

        def add(self, name, entry_points, modules, version="1.0", group="sglang_spec_plugins"):
            make_dist(root, name, entry_points, modules, version, group)
            importlib.invalidate_caches()  # importlib.metadata's and the finders' view of the new files
            for module in modules:
                sys.modules.pop(module, None)

    yield Site()


@pytest.fixture
def write_toml(tmp_path):
    def write(text, name="plugins.toml"):
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


@pytest.fixture
def cli(capsys):
    """``cli(*args)`` runs ``sglang-spec-plugins ARGS`` in this process, as the
    console script does (``sys.exit(main(argv))``), and returns
    ``(exit status, stdout, stderr)``. The environment, the working directory
    and ``sys.path`` are this process's: set them with ``monkeypatch`` (and
    ``site``) before the call."""
    from sglang_spec_plugins.cli import main

    def run(*args):
        capsys.readouterr()
        try:
            status = main([str(arg) for arg in args])
        except SystemExit as exc:  # argparse's usage errors (2)
            status = exc.code
        out, err = capsys.readouterr()
        return status, out, err

    return run


@pytest.fixture
def kit(request, tmp_path, monkeypatch):
    """The conformance kit as a drafter's suite runs it (``-p sglang_spec_plugins.testing``), in an inner
    pytest session in this process (pytester), in an empty project. ``kit.install(name, source)`` installs
    the module ``NAME_plugin`` as the distribution ``broken-NAME`` (entry point NAME) into a site directory
    on sys.path and on PYTHONPATH (the kit's fresh processes import it too); ``kit.run(*plugins, select=,
    extra=())`` runs the kit on those plugins (``select``: its ``-k``; None: every item) and returns
    pytester's RunResult. The environment names no plugin, plugins.toml or agreement; the kit's processes
    use the user's source cache (pytester points HOME at its project)."""
    from sglang_spec_plugins.engine.source_cache import CACHE_ENV, cache_dir

    source_cache = cache_dir()  # before pytester moves HOME
    pytester = request.getfixturevalue("pytester")
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv(CACHE_ENV, str(source_cache) if source_cache else "off")
    for name in ("SGLANG_SPEC_PLUGINS", "SGLANG_SPEC_PLUGINS_CONFIG", "SGLANG_SPEC_PLUGINS_AGREEMENT"):
        monkeypatch.delenv(name, raising=False)

    class Kit:
        site = root

        def install(self, name, source):
            make_dist(root, f"broken-{name}", {name: f"{name}_plugin"}, {f"{name}_plugin": source})
            importlib.invalidate_caches()
            sys.modules.pop(f"{name}_plugin", None)

        def run(self, *plugins, select="not sglang_", extra=()):
            return pytester.runpytest("-p", "no:cacheprovider", "-p", "sglang_spec_plugins.testing",
                                      *[arg for name in plugins for arg in ("--sglang-spec-plugin", name)],
                                      *(("-k", select) if select else ()), "-rfs", *extra)

    return Kit()
