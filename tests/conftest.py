import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from dists import make_dist  # noqa: E402


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
