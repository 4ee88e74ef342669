"""Plugin code that acts on the whole process (issue 24 items 4 and 7): a
KeyboardInterrupt from a validator or a worker factory, output written to the
real stdout, an import that hangs, an import that ends the process. Each
through the commands an operator runs, in their own process (the process is
the point): ``sglang-spec-plugins list | check``, and a server process's
start (SGLang's ``load_plugins()``, then its own resolution of the command
line). The operator gets one line naming the plugin and what it was doing,
never a bare traceback or a silent exit."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bad_inputs import FLAGS, WIDTH, bad_plugin, plugin_modules
from dists import simple_plugin

# slow: the main run (0.5.23) runs it; on the other releases what plugin code may do is handled by the loader, not by SGLang: tests/test_plugins.py and test_bad_inputs run on every release
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
BAD = "plugin 'bad' (bad-drafter==1.0)"

SERVER = """
import sys
from sglang_spec_plugins.testing.cpu import install_stand_ins
install_stand_ins()
import sglang.srt.plugins
sglang.srt.plugins.load_plugins()
print("LOADED", flush=True)
from bad_inputs import FLAGS, resolve_server_args
resolve_server_args(**FLAGS)
print("RESOLVED", flush=True)
"""
"""A server process's start: SGLang's plugin loading, then its resolution of the operator's arguments."""


@pytest.fixture
def bad(site, tmp_path):
    """``bad(source)``: install plugin ``bad`` from ``source``; returns the environment of a process that
    enables it (plugins.toml in ``tmp_path``, the working directory)."""

    def install(source):
        site.add("bad-drafter", {"bad": "bad_mod"}, plugin_modules("bad_mod", source))
        (tmp_path / "plugins.toml").write_text(WIDTH)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SPEC_PLUGINS") and k != "SGLANG_PLUGINS"}
        env.update(SGLANG_SPEC_PLUGINS_CONFIG=str(tmp_path / "plugins.toml"), TRITON_INTERPRET="1",
                   PYTHONPATH=os.pathsep.join([str(site.path), str(HERE), str(HERE.parent)] + sys.path))
        return env

    return install


def run(argv, env, cwd, timeout=300):
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def cli(*args):
    return [sys.executable, "-m", "sglang_spec_plugins", *args]


def server():
    return [sys.executable, "-c", SERVER]


def check_args():
    return ["check", "-n4", "--disable-overlap-schedule"]


def assert_named_without_traceback(out, message, status):
    assert out.returncode == status, (out.returncode, out.stdout[-2000:], out.stderr[-3000:])
    assert message in out.stderr, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]


@pytest.mark.parametrize("where", ["validator", "factory"])
def test_a_keyboard_interrupt_from_plugin_code_stops_naming_it(bad, tmp_path, where):
    """It is not a fault to collect or skip (it may be the operator's Ctrl-C): the run stops at once, status
    130, saying which plugin's code was interrupted."""
    env = bad(bad_plugin(f"{where}_interrupted"))
    call = "validate_server_args" if where == "validator" else "worker_factory"
    message = f"{BAD}: algorithm BAD: {call} was interrupted (KeyboardInterrupt)"
    assert_named_without_traceback(run(cli(*check_args(), "--single-process"), env, tmp_path), message, 130)
    started = run(server(), env, tmp_path)
    assert "LOADED" in started.stdout and "RESOLVED" not in started.stdout, started.stdout
    assert_named_without_traceback(started, message, 130)


def test_output_on_the_real_stdout_at_import_leaves_the_reports_intact(bad, tmp_path):
    loud = ("import os, sys\nos.write(1, b'written to fd 1\\n')\nsys.__stdout__.write('written to sys.__stdout__\\n')\n"
            "sys.__stdout__.flush()\n")
    env = bad(loud + bad_plugin("startable"))
    listed = run(cli("list", "--json"), env, tmp_path)
    assert listed.returncode == 0 and json.loads(listed.stdout)["algorithms"]["BAD"]["plugin"] == "bad", listed.stdout
    checked = run(cli(*check_args(), "--json"), env, tmp_path)
    report = json.loads(checked.stdout)
    assert checked.returncode == 0 and report["ok"], report
    assert "written to fd 1" in checked.stderr and "written to sys.__stdout__" in checked.stderr
    plain = run(cli(*check_args()), env, tmp_path)
    assert plain.returncode == 0 and plain.stdout.splitlines()[-1] == "ok", plain.stdout + plain.stderr


@pytest.mark.parametrize("command", ["check", "server"])
def test_an_import_that_hangs_is_named_while_it_hangs(bad, tmp_path, command):
    env = bad("import time\ntime.sleep(3600)\n" + simple_plugin("BAD", width="2"))
    argv = cli("check", "--single-process") if command == "check" else server()
    message = f"sglang-spec-plugins: {BAD}: still importing bad_mod after 10 s"
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as sink:
        process = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=sink, text=True)
    try:  # the message comes 10 s into the import; importing SGLang first takes 4-20 s on a loaded 2-core machine
        deadline = time.monotonic() + 90
        while message not in stderr.read_text() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        assert process.poll() is None, "the process ended while the import hung"
    finally:
        process.kill()
        process.wait()
    assert message in stderr.read_text(), stderr.read_text()[-3000:]


@pytest.mark.parametrize("command", ["list", "check", "server"])
def test_an_import_that_ends_the_process_is_refused(bad, tmp_path, command):
    env = bad("import os\nos._exit(0)\n" + simple_plugin("BAD", width="2"))
    argv = {"list": cli("list"), "check": cli("check", "--single-process"), "server": server()}[command]
    out = run(argv, env, tmp_path)
    assert_named_without_traceback(out, f"{BAD}: cannot import bad_mod: os._exit (it called os._exit(0), which ends the "
                                        "process at once, with status 0 and no message; a plugin must raise instead)", 1)
