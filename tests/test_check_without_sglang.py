"""``check`` where SGLang is not installed (issue 24 item 8): it cannot run a
plugin's ``validate_server_args`` and worker factory (SGLang hands them its
own ``ServerArgs``), so it says, by name, that it did not run them instead of
a plain "ok". Runs in the Python matrix's fresh venvs (tests/python_matrix.sh),
which have no SGLang; skipped where SGLang is installed."""

import importlib.util
import json

import pytest

from dists import PLUGIN_HEADER

pytestmark = pytest.mark.skipif(importlib.util.find_spec("sglang") is not None,
                                reason="SGLang is installed here; the Python matrix runs this without it")

SOURCE = PLUGIN_HEADER + '''
def _validate(server_args):
    raise ValueError("blocks of 16 only")


def _factory(server_args):
    raise ImportError("needs flash_attn")


@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="BAD", worker_factory=_factory, validate_server_args=_validate)]
'''


def test_check_names_what_it_did_not_run(cli, site, tmp_path, monkeypatch):
    site.add("bad-drafter", {"bad": "bad_mod"}, {"bad_mod": SOURCE})
    (tmp_path / "plugins.toml").write_text("[plugins]\nenable = ['bad']\n")
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS_CONFIG", str(tmp_path / "plugins.toml"))
    status, out, err = cli("check", "-n4", "--single-process")
    assert status == 0, out + err
    not_run = "validate_server_args and worker_factory of BAD (plugin 'bad'), which need SGLang's ServerArgs"
    assert f"SGLang: not installed here; not run: {not_run}, and the checks on the SGLang release" in out, out
    assert out.splitlines()[-1] == "ok, except what was not run here (SGLang is not installed)", out
    report = json.loads(cli("check", "-n4", "--single-process", "--json")[1])
    assert report["ok"] and report["not_run"] == [not_run], report
