import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from dists import make_dist  # noqa: E402

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

        def add(self, name, entry_points, modules, version="1.0"):
            make_dist(root, name, entry_points, modules, version)
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
