"""A launcher and the scheduler ranks it spawns agree on the fingerprint and
every width, or the rank that differs is refused at start-up naming both
values and both processes (issue 16 item 10, issue 18's CPU part).

Real processes: ``launcher_and_ranks.py`` runs SGLang's own ``load_plugins()``
in a launcher and in ranks spawned by multiprocessing's spawn context, as
SGLang spawns its schedulers.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from dists import make_dist, simple_plugin
import pytest  # noqa: E402

# slow: the main run (0.5.23) runs it; on the other releases the agreement is this package's (tests/test_agreement*.py); test_agreement_directory runs on every release
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
CONFIG = "[plugins]\nenable = ['skew']\n[algorithms.SKEW]\nmax_tokens_per_req = 8\n"
WIDTH = "int(__import__('os').environ.get('SKEW_WIDTH', '4'))"
"""A width that depends on the process (its environment): what item 10 is about."""


def run_ranks(tmp_path, ranks, source=simple_plugin("SKEW", width=WIDTH)):
    launcher_site = make_dist(tmp_path / "site1", "skew-drafter", {"skew": "skew_mod"}, {"skew_mod": source})
    other_version = make_dist(tmp_path / "site2", "skew-drafter", {"skew": "skew_mod"}, {"skew_mod": simple_plugin("SKEW", width=WIDTH, draft="True")}, version="1.1")
    (tmp_path / "plugins.toml").write_text(CONFIG)
    (tmp_path / "other.toml").write_text(CONFIG + "verify_hint = 2\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SPEC_PLUGINS") and k not in ("SGLANG_PLUGINS", "SKEW_WIDTH")}
    env.update(SGLANG_SPEC_PLUGINS_CONFIG=str(tmp_path / "plugins.toml"), LAUNCHER_SITE=str(launcher_site),
               PYTHONPATH=os.pathsep.join([str(launcher_site), str(HERE.parent), str(HERE)] + sys.path))
    for spec in ranks:
        spec.setdefault("env", {})
        if spec.pop("other_version", False):
            spec["site"] = str(other_version)
        if spec.pop("other_toml", False):
            spec["env"]["SGLANG_SPEC_PLUGINS_CONFIG"] = str(tmp_path / "other.toml")
    out = subprocess.run([sys.executable, str(HERE / "launcher_and_ranks.py"), json.dumps(ranks)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [line["rank"] for line in lines] == ["launcher"] + list(range(1, len(ranks) + 1)), out.stdout + out.stderr[-3000:]
    return lines


def test_ranks_agree_or_the_one_that_differs_is_refused(tmp_path):
    lines = run_ranks(tmp_path, [{}, {"other_toml": True}, {"other_version": True}, {"env": {"SKEW_WIDTH": "2"}}])
    launcher, same, other_toml, other_version, other_width = lines
    assert launcher["outcome"] == "ok" and same == {**same, "outcome": "ok", "message": launcher["message"]}
    assert launcher["agreement"] and {line["agreement"] for line in lines} == {launcher["agreement"]}  # inherited

    first = f"pid {launcher['pid']} (MainProcess, launcher_and_ranks.py)"
    for rank, differs in (
            (other_toml, f"plugins.toml: algorithms.SKEW.settings.verify_hint is 2 in this process but not set in {first}; "
                         "they read other plugins.toml settings (SGLANG_SPEC_PLUGINS_CONFIG, or a file changed while "
                         "they started): give every process of the server the same file"),
            (other_version, f"plugin 'skew' is skew-drafter==1.1 in this process but skew-drafter==1.0 in {first}; the "
                            "answers known at load: SKEW.draft_may_verify is true in this process but false "
                            f"in {first}; a plugin was installed, upgraded or removed while the server's processes "
                            "started (or they see other installed packages): restart the server once no install runs")):
        assert rank["outcome"] == "refused", rank
        fingerprint = rank["message"].split(" has fingerprint ")[1][:16]
        assert fingerprint != launcher["message"]
        assert rank["message"] == (
            f"this process (pid {rank['pid']} (SpawnProcess-{rank['rank']}, launcher_and_ranks.py)) has fingerprint "
            f"{fingerprint}, but {first} of the same server has {launcher['message']}: {differs} "
            f"(SGLANG_SPEC_PLUGINS_AGREEMENT={launcher['agreement']})"), rank["message"]

    assert other_width["outcome"] == "refused"
    assert other_width["message"] == (
        f"algorithm SKEW (plugin 'skew'): sgl_spec_verify_width(num_draft_tokens=8, is_draft_worker=False) is 2 in this "
        f"process (pid {other_width['pid']} (SpawnProcess-4, launcher_and_ranks.py)) "
        f"but 4 in pid {launcher['pid']} (MainProcess, launcher_and_ranks.py) of the same server: the plugin's answer "
        "depends on the process, and ranks that verify different widths produce wrong tokens"), other_width["message"]


WIDTHS = "{1: int(__import__('os').environ.get('SKEW_W1', '4')), int(__import__('os').environ.get('SKEW_FROM', '8')): 2}"
"""Widths by batch size that depend on the process (its environment): launcher ``{1 = 4, 8 = 2}``."""


def test_ranks_agree_on_widths_by_batch_size_or_the_one_that_differs_is_refused(tmp_path):
    """Issue 24 item 2: a rank whose hook answers ``{1 = 2, 8 = 2}`` (another maximum) or ``{1 = 4, 16 = 2}``
    (the same maximum, other buckets) against the launcher's ``{1 = 4, 8 = 2}``, each refused naming both
    answers and both processes; a rank with the launcher's answer starts."""
    lines = run_ranks(tmp_path, [{}, {"env": {"SKEW_W1": "2"}}, {"env": {"SKEW_FROM": "16"}}],
                      simple_plugin("SKEW", widths=WIDTHS))
    launcher, same, other_maximum, other_buckets = lines
    assert launcher["outcome"] == "ok" and same["outcome"] == "ok", lines
    for rank, answer in ((other_maximum, "{1 = 2, 8 = 2}"), (other_buckets, "{1 = 4, 16 = 2}")):
        assert rank["outcome"] == "refused", rank
        assert rank["message"] == (
            f"algorithm SKEW (plugin 'skew'): sgl_spec_widths_by_batch_size(num_draft_tokens=8, is_draft_worker=False) is "
            f"{answer} in this process (pid {rank['pid']} (SpawnProcess-{rank['rank']}, launcher_and_ranks.py)) but "
            f"{{1 = 4, 8 = 2}} in pid {launcher['pid']} (MainProcess, launcher_and_ranks.py) of the same server: the "
            "plugin's answer depends on the process, and ranks that verify different widths produce wrong tokens"), rank


def _join(fingerprint, queue):
    from sglang_spec_plugins import agreement

    try:
        queue.put(agreement.join(fingerprint))
    except Exception as exc:
        queue.put(f"refused: {exc}")


def test_only_processes_spawned_from_the_creator_join(tmp_path, monkeypatch):
    """A process spawned by multiprocessing from the agreement's creator joins it;
    a plain subprocess of the creator (another server a program starts), or a
    process of an unrelated creator, starts its own."""
    import multiprocessing

    where = tmp_path / "agreement"
    where.mkdir()
    from sglang_spec_plugins import agreement

    parent = os.getppid()  # alive, and an ancestor of every process this test starts
    agreement.record_file(where, "fingerprint").write_text(json.dumps(
        {"answer": "fingerprint", "value": "0123456789abcdef", "process": "pid 1 (x, y)", "pid": parent,
         "started": agreement.started(parent)}))
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS_AGREEMENT", str(where))
    code = "from sglang_spec_plugins import agreement; print(agreement.join('fedcba9876543210'))"

    def spawned():
        queue = multiprocessing.get_context("spawn").Queue()
        process = multiprocessing.get_context("spawn").Process(target=_join, args=("fedcba9876543210", queue))
        process.start()
        answer = queue.get(timeout=120)
        process.join()
        return answer

    other = subprocess.Popen(["sleep", "60"])
    try:
        (where / "creator").write_text(str(other.pid))  # not an ancestor
        assert str(where) not in spawned()
    finally:
        other.kill()
        other.wait()
    (where / "creator").write_text(str(os.getpid()))  # this test's process
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and str(where) not in out.stdout and "recorded" in out.stdout, out.stdout + out.stderr
    answer = spawned()
    assert answer.startswith("refused: this process (pid ") and "has fingerprint fedcba9876543210, but pid 1 (x, y) of the same server has 0123456789abcdef" in answer, answer
