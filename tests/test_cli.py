"""The CLI, run as a user runs it: the installed console script in a subprocess."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pluggy
import pytest

from dists import make_dist, simple_plugin

ROOT = Path(__file__).resolve().parent.parent
EXE = Path(sys.executable).with_name("sglang-spec-plugins")


def run(*args, env=None, cwd=None):
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.fixture
def env(tmp_path):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SPEC_PLUGINS")}
    environ["SGLANG_SPEC_PLUGINS_CONFIG"] = str(ROOT / "plugins.toml")
    return environ


def test_list_json_shows_example_hooks_with_distribution_and_version(env):
    out = run("list", "--json", env=env)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["config"] == str(ROOT / "plugins.toml")
    widths = {i["plugin"]: i for i in data["hooks"]["sgl_spec_verify_width"]}
    assert widths["sbd"]["distribution"] == "sglang-spec-example-sbd" and widths["sbd"]["version"] == "0.1.0"
    assert widths["sbd"]["module_file"].endswith("sbd_drafter/plugin.py")
    assert [i["plugin"] for i in data["hooks"]["sgl_spec_draft_may_verify"]] == ["dflash_block"]
    assert data["algorithms"]["SBD"]["plugin"] == "sbd"
    assert data["algorithms"]["SBD"]["settings"] == {"verify_width": 8}
    assert data["algorithms"]["DFLASH_BLOCK"]["supports_overlap"] is True


def test_list_text(env):
    out = run("list", env=env)
    assert out.returncode == 0
    assert "sgl_spec_verify_width" in out.stdout
    assert "SBD              plugin sbd (sglang-spec-example-sbd==0.1.0), overlap=False" in out.stdout


def test_check_good_file_resolves_widths(env):
    out = run("check", str(ROOT / "plugins.toml"), "-n", "16", "--json", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(out.stdout)
    assert data["ok"] is True
    assert data["algorithms"]["SBD"]["widths"]["16"] == {"target": 8, "draft": None, "max": 16}
    assert data["algorithms"]["DFLASH_BLOCK"]["widths"]["16"] == {"target": 16, "draft": 16, "max": 16}


def test_check_lists_every_problem_and_fails(env, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[plugins]\non_error = 'maybe'\nenable = ['sbd']\ndisable = ['sbd']\n[algorithms.EAGLE]\n")
    out = run("check", str(bad), env=env)
    assert out.returncode == 1
    assert f"error: {bad}: [plugins] on_error must be one of 'fail', 'skip', got 'maybe'" in out.stderr
    assert f"error: {bad}: [plugins] plugin 'sbd' is in both enable and disable" in out.stderr
    assert f"error: {bad}: [algorithms.EAGLE] 'EAGLE' is a built-in SGLang algorithm name" in out.stderr


def test_check_reports_bad_widths(env, tmp_path):
    cfg = tmp_path / "narrow.toml"
    cfg.write_text("[algorithms.SBD]\nmax_tokens_per_req = 16\nverify_width = 32\n")
    out = run("check", str(cfg), "-n", "16", env=env)
    assert out.returncode == 1
    assert "plugin 'sbd': algorithm SBD: sgl_spec_verify_width(num_draft_tokens=16, is_draft_worker=False) returned 32" in out.stderr


def test_check_missing_file(env, tmp_path):
    out = run("check", str(tmp_path / "none.toml"), env=env)
    assert out.returncode == 1 and "none.toml: no such file" in out.stderr


def test_doctor_reports_installed_sglang(env):
    code = "from sglang_cpu import install_stand_ins; install_stand_ins(); from sglang_spec_plugins.cli import main; raise SystemExit(main(['doctor', '--json']))"
    env["PYTHONPATH"] = str(ROOT / "tests")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    data = json.loads(out.stdout)
    assert out.returncode == 0, data
    from importlib import metadata

    assert data["sglang"]["version"] == metadata.version("sglang")
    assert data["sglang"]["algorithm_registry"] is True and data["sglang"]["plugin_framework"] is True
    assert data["would_register"] == ["DFLASH_BLOCK", "SBD"]


def test_doctor_reports_a_broken_sglang_install(env):
    """On this CPU harness SGLang cannot import without the torchvision stand-ins."""
    out = run("doctor", env=env)
    assert out.returncode == 1
    assert "importing its speculative modules failed: RuntimeError: operator torchvision::nms does not exist" in out.stdout


def test_package_and_list_work_without_sglang(tmp_path):
    """No SGLang and no torch on the path: only this package, pluggy and a plugin."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for module in (pluggy,):
        src = Path(module.__file__).parent
        shutil.copytree(src, lib / src.name)
    shutil.copytree(ROOT / "sglang_spec_plugins", lib / "sglang_spec_plugins")
    make_dist(lib, "solo-drafter", {"solo": "solo_mod"}, {"solo_mod": simple_plugin("SOLO", width="2")})
    code = (
        "import sys, sglang_spec_plugins\n"
        "from sglang_spec_plugins.cli import main\n"
        "rc = main(['list'])\n"
        "assert 'sglang' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)\n"
        "print('RC', rc, main(['doctor']))\n"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(lib), "PATH": os.environ.get("PATH", "")}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "SOLO             plugin solo (solo-drafter==1.0)" in out.stdout
    assert "SGLang: not installed" in out.stdout
    assert "RC 0 1" in out.stdout
