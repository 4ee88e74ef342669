"""The agreement directory as a real machine holds it (issue 24): one this user
cannot write, a record a live but unrelated process wrote, a pid reused since
it recorded, and an algorithm name too long for a file name. Each is refused
at load through SGLang's own ``load_plugins()``, naming the directory and what
to remove or set, with nothing left registered or patched (or, for the long
name, served), and ``check`` says the same."""

import json
import os
import re
import subprocess
import types
from pathlib import Path

import pytest

from bad_inputs import WIDTH
from dists import simple_plugin
from patch_state import assert_untouched, importable_targets, plugin_algorithms
from sglang_spec_plugins import agreement, cli
from sglang_spec_plugins.errors import StartupRefused
from sglang_spec_plugins.testing.cpu import reset_plugin_state, run_sglang_plugin_loading

ENV = "SGLANG_SPEC_PLUGINS_AGREEMENT"


@pytest.fixture
def server(site, tmp_path, monkeypatch):
    """A plugin ``bad`` (BAD verifying 2 of 8) enabled by plugins.toml; returns the agreement directory to fill."""
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    site.add("bad-drafter", {"bad": "bad_mod"}, {"bad_mod": simple_plugin("BAD", width="2")})
    (tmp_path / "plugins.toml").write_text(WIDTH)
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS_CONFIG", str(tmp_path / "plugins.toml"))
    where = tmp_path / "agreement"
    where.mkdir()
    monkeypatch.setenv(ENV, str(where))
    reset_plugin_state()
    yield where
    reset_plugin_state()


def refused_at_load(message):
    with pytest.raises(StartupRefused) as info:
        run_sglang_plugin_loading()
    assert re.search(message, str(info.value.cause)), str(info.value.cause)
    assert_untouched(importable_targets())


def check_says(message, capsys):
    capsys.readouterr()
    assert cli.main(["check", "--json", "--single-process"]) == 1
    out = capsys.readouterr()
    problems = json.loads(out.out or out.err)["problems"]
    assert any(re.search(message, p) for p in problems), problems


def record(where, pid, started, value="0123456789abcdef"):
    agreement.record_file(where, "fingerprint").write_text(json.dumps(
        {"answer": "fingerprint", "value": value, "process": f"pid {pid} (MainProcess, launch_server.py)", "pid": pid,
         "started": started}))


def test_a_directory_this_process_cannot_write(server, capsys):
    """Made read-only the way this machine allows: its mode, and for root (whom modes do not stop) the
    immutable attribute."""
    os.chmod(server, 0o555)
    immutable = os.geteuid() == 0
    if immutable and subprocess.run(["chattr", "+i", str(server)], capture_output=True).returncode != 0:
        os.chmod(server, 0o755)
        pytest.skip("running as root on a file system without chattr +i: no directory is unwritable here")
    try:
        message = (rf"{ENV}={re.escape(str(server))}: cannot record this process's fingerprint in it \((PermissionError|"
                   rf"OSError): .*\); make it writable for this process, or unset {ENV} \(the server's first process "
                   r"then makes a fresh directory\)")
        refused_at_load(message)
        check_says(message, capsys)
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(server)], check=True)
        os.chmod(server, 0o755)


def test_a_record_of_a_live_process_of_another_server(server, capsys):
    """Two servers pointed at one directory: the record's process runs, but this process does not descend from it."""
    other = subprocess.Popen(["sleep", "300"])
    try:
        record(server, other.pid, agreement.started(other.pid))
        message = (rf"{re.escape(str(server))}/fingerprint.json was recorded by pid {other.pid} \(MainProcess, "
                   rf"launch_server.py\), which runs but is neither this process nor one it descends from: two servers "
                   rf"share {ENV}={re.escape(str(server))}; give each server its own directory, or unset {ENV}")
        refused_at_load(message)
    finally:
        other.kill()
        other.wait()


def test_a_record_of_a_pid_reused_since(server, capsys):
    """The recording process exited and its pid now names another (this test's parent): its start time differs."""
    parent = os.getppid()
    record(server, parent, agreement.started(parent) + 1)
    message = (rf"{re.escape(str(server))}/fingerprint.json was recorded by pid {parent} \(MainProcess, launch_server.py\), "
               r"which is no longer running: a record an earlier server left in a reused directory; remove "
               rf"{re.escape(str(server))} \(or the files in it\), or unset {ENV}")
    refused_at_load(message)
    check_says(message, capsys)


def test_an_algorithm_name_too_long_for_a_file_name_is_served(site, tmp_path, monkeypatch, capsys):
    """A valid algorithm name of 250 letters: the answers it records go to files named by a digest."""
    name = "A" * 250
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    site.add("long-drafter", {"long": "long_mod"}, {"long_mod": simple_plugin(name, width="2")})
    (tmp_path / "plugins.toml").write_text("[plugins]\nenable = ['long']\n")
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS_CONFIG", str(tmp_path / "plugins.toml"))
    monkeypatch.delenv(ENV, raising=False)
    reset_plugin_state()
    try:
        run_sglang_plugin_loading()
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        algorithm = SpeculativeAlgorithm.from_string(name)
        algorithm.handle_server_args(types.SimpleNamespace(speculative_num_draft_tokens=8))
        assert algorithm.get_num_tokens_per_req_for_target_verify(8, False) == 2
        assert plugin_algorithms() == [name]
        where = os.environ[ENV]
        files = sorted(os.listdir(where))
        assert len(files) > 2 and all(len(f) < 64 for f in files), files
        answers = [json.loads(open(os.path.join(where, f)).read()) for f in files if f.startswith("answer.")]
        assert f"{name}: sgl_spec_verify_width(num_draft_tokens=8, is_draft_worker=False)" in [a["answer"] for a in answers]
        cli.main(["check", "--json", "--single-process", "-n8"])  # the bare Worker class has other problems
        problems = json.loads(capsys.readouterr().out)["problems"]
        assert not [p for p in problems if "agreement" in p or "File name" in p], problems
    finally:
        reset_plugin_state()


def _join(fingerprint, queue):
    from sglang_spec_plugins import agreement as spawned

    try:
        queue.put(spawned.join(fingerprint))
    except Exception as exc:
        queue.put(f"refused: {exc}")


@pytest.fixture
def made(tmp_path, monkeypatch):
    """The agreement this process makes as a server's first process (under ``tmp_path``); left after the test."""
    import tempfile

    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    agreement._reset_for_tests()
    agreement.join("0123456789abcdef")
    yield Path(os.environ[ENV])
    agreement._reset_for_tests()


def test_a_directory_removed_while_the_servers_processes_start_is_refused(made):
    """The launcher made its agreement, then something removed it (a cleaner of temporary files): a rank it spawns
    is refused, naming the directory and its maker, instead of making an agreement of its own, alone, free to
    verify other widths than its server's other ranks (which it did, without a word)."""
    import multiprocessing
    import shutil

    shutil.rmtree(made)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_join, args=("0123456789abcdef", queue))
    process.start()
    answer = queue.get(timeout=120)
    process.join()
    assert answer == (
        f"refused: {ENV}={made}: this server's agreement directory, made by its process pid {os.getpid()} (an ancestor "
        "of this process, still running), is gone: something removed it while the server's processes started (a "
        "cleaner of temporary files, such as systemd-tmpfiles or tmpwatch, or a script), so this process cannot agree "
        "with the others on the widths they serve; restart the server, and keep the directory: set TMPDIR, or "
        f"{ENV} to a directory made for this server, to one no cleaner removes"), answer
    assert not made.exists()


def test_a_directory_removed_while_the_server_runs_stops_the_next_answer(made):
    import shutil

    shutil.rmtree(made)
    with pytest.raises(agreement.AgreementError, match=rf"{ENV}={re.escape(str(made))}: cannot record SKEW: w: the "
                                                       r"directory is gone, removed while the server runs"):
        agreement.agree(agreement.Answer("SKEW: w", 2, "algorithm SKEW: w"))


def test_a_plugin_upgraded_while_the_server_starts_is_named(server, capsys):
    """The launcher's fingerprint and what it digests recorded with bad-drafter 0.9 (it started before an upgrade
    to 1.0): this process is refused naming the plugin and both versions, and check says the same."""
    from sglang_spec_plugins import loader
    from sglang_spec_plugins.engine.probe import probe
    from sglang_spec_plugins.fingerprint import as_json, digest, fingerprint_data

    plugin_set, policies = loader.resolve()
    theirs = as_json(fingerprint_data(plugin_set, policies, probe().version))
    theirs["plugins"] = [[name, dist, "0.9" if name == "bad" else version] for name, dist, version in theirs["plugins"]]
    parent = os.getppid()
    for answer, value in (("fingerprint inputs", theirs), ("fingerprint", digest(theirs))):
        agreement.record_file(server, answer).write_text(json.dumps(
            {"answer": answer, "value": value, "process": f"pid {parent} (MainProcess, launch_server.py)", "pid": parent,
             "started": agreement.started(parent)}))
    message = (rf"of the same server has {digest(theirs)}: plugin 'bad' is bad-drafter==1.0 in this process but "
               rf"bad-drafter==0.9 in pid {parent} \(MainProcess, launch_server.py\); a plugin was installed, upgraded or "
               r"removed while the server's processes started \(or they see other installed packages\): restart the "
               rf"server once no install runs \({ENV}={re.escape(str(server))}\)$")
    refused_at_load(message)
    check_says(message, capsys)
