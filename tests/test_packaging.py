"""The package as published: the sdist and wheel a release builds (with setuptools' own PEP 517 hooks, as
`python -m build` calls them), from a copy of the files a checkout has."""

import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("setup.cfg", "pyproject.toml", "MANIFEST.in", "README.md", "CHANGELOG.md", "LICENSE", "plugins.toml")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    src = tmp_path_factory.mktemp("src")
    for name in SHIPPED:
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "sglang_spec_plugins", src / "sglang_spec_plugins", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "docs", src / "docs")
    for name in ("tests", "tools"):  # must not be shipped
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = src / "dist"
    built = []
    for hook in ("build_sdist", "build_wheel"):  # one process each: setuptools keeps state between the two
        code = f"from setuptools import build_meta as b; import sys; print('BUILT', b.{hook}(sys.argv[1]))"
        run = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        built.append([line for line in run.stdout.splitlines() if line.startswith("BUILT ")][-1].split()[1])
    sdist, wheel = built
    return out / sdist, out / wheel


def test_wheel_metadata_license_and_typing(built):
    _, wheel = built
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        meta = Parser().parsestr(whl.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode())
        license_text = whl.read(next(n for n in names if n.endswith("/LICENSE"))).decode()
    assert "sglang_spec_plugins/py.typed" in names
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert meta["License"] == "Apache-2.0"
    classifiers = meta.get_all("Classifier")
    for minor in (10, 11, 12, 13):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers
    assert "Typing :: Typed" in classifiers and "License :: OSI Approved :: Apache Software License" in classifiers
    assert meta.get_all("Project-URL"), "no Project-URL"
    assert meta["Requires-Python"] == ">=3.10"
    assert not any(n.startswith(("tests/", "examples/", "docs/", "tools/")) for n in names)


def test_wheel_ships_every_module(built):
    """Every module of the source tree is in the wheel (a subpackage without ``__init__.py`` is not found by
    setuptools and would be left out: the loader would then fail to import it where SGLang runs)."""
    _, wheel = built
    source = {str(p.relative_to(ROOT)) for p in (ROOT / "sglang_spec_plugins").rglob("*.py")}
    with zipfile.ZipFile(wheel) as whl:
        shipped = {n for n in whl.namelist() if n.endswith(".py")}
    assert source - shipped == set()


def test_sdist_ships_the_package_and_its_documents_and_no_tests(built):
    """The README's links into docs/ resolve in the sdist too: every page is shipped."""
    sdist, _ = built
    with tarfile.open(sdist) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    for name in ("LICENSE", "README.md", "CHANGELOG.md", "sglang_spec_plugins/py.typed", "sglang_spec_plugins/cli.py"):
        assert name in names, name
    pages = {str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")}
    assert pages and pages <= set(names), sorted(pages - set(names))
    assert not [n for n in names if n.startswith(("tests", "examples", "benchmarks", "tools"))]
