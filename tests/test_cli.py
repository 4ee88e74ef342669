"""The CLI: ``main(argv)`` in this process (the ``cli`` fixture), and the installed console script in a
subprocess where a process of its own is the point (each such test says why)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pluggy
import pytest
from packaging.version import Version

from dists import make_dist, simple_plugin

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "tests" / "examples.toml"
"""The two shape examples (SBD, DFLASH_BLOCK); ROOT / "plugins.toml" is the quick start's."""
EXE = Path(sys.executable).with_name("sglang-spec-plugins")


def run(*args, cwd=None):
    """The console script in a subprocess, in this process's environment."""
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(autouse=True)
def examples(monkeypatch):
    """No SGLANG_SPEC_PLUGINS* setting of the caller's; plugins.toml: the two shape examples."""
    for name in [k for k in os.environ if k.startswith("SGLANG_SPEC_PLUGINS")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS_CONFIG", str(EXAMPLES))


@pytest.fixture
def drafters(site, monkeypatch):
    """``site`` (tests/conftest.py), also on PYTHONPATH: the fresh process ``check`` starts finds its drafters too."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site.path), os.environ.get("PYTHONPATH")])))
    return site


@pytest.mark.sglang
def test_list_json_shows_example_hooks_with_distribution_and_version(cli):
    status, out, err = cli("list", "--json")
    assert status == 0, err
    data = json.loads(out)
    assert data["config"] == str(EXAMPLES)
    widths = {i["plugin"]: i for i in data["hooks"]["sgl_spec_verify_width"]}
    assert widths["sbd"]["distribution"] == "sglang-spec-example-sbd" and widths["sbd"]["version"] == "0.1.0"
    assert widths["sbd"]["module_file"].endswith("sbd_drafter/plugin.py")
    assert [i["plugin"] for i in data["hooks"]["sgl_spec_draft_may_verify"]] == ["dflash_block"]
    assert data["algorithms"]["SBD"]["plugin"] == "sbd"
    assert data["algorithms"]["SBD"]["settings"] == {"verify_width": 8}
    assert data["algorithms"]["DFLASH_BLOCK"]["supports_overlap"] is True
    assert (data["algorithms"]["SBD"]["verify_shape"], data["algorithms"]["SBD"]["capabilities"]) == ("chain", {"has_draft_kv": False})


@pytest.mark.sglang
def test_list_text(cli):
    status, out, _ = cli("list")
    assert status == 0
    assert "sgl_spec_verify_width" in out
    assert "SBD              plugin sbd (sglang-spec-example-sbd==0.1.0), overlap=True" in out


@pytest.mark.sglang
def schema_refusals(ndt: int = 16, algorithms=("SBD", "DFLASH_BLOCK")):
    """``{algorithm: problem}``: what check reports for these example algorithms (default: those of
    tests/examples.toml) on a release before the V2 schema (0.5.12-0.5.13): DFLASH_BLOCK refused whole,
    SBD and PROMPT_LOOKUP by their release checks; empty from 0.5.14 on and without SGLang (check then
    runs none of its checks)."""
    from importlib import metadata

    try:
        release = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return {}
    if Version(release) >= Version("0.5.14"):
        return {}
    from sglang_spec_plugins.worker import contract

    def validator(plugin, name):
        return (f"plugin '{plugin}' (sglang-spec-example-{plugin.replace('_', '-')}==0.1.0): algorithm {name}: "
                f"validate_server_args refused --speculative-num-draft-tokens {ndt}: ValueError: {name} drives SGLang's "
                f"V2 speculative schema (SGLang 0.5.14+); SGLang {release} runs synchronous plugin workers on "
                f"{contract().non_overlap_schema!r}")

    found = {"DFLASH_BLOCK": f"plugin 'dflash_block' (sglang-spec-example-dflash-block==0.1.0): algorithm DFLASH_BLOCK: a "
                             f"worker with its own draft model needs SGLang 0.5.14+ (the V2 speculative schema); SGLang "
                             f"{release} is not served",
             "SBD": validator("sbd", "SBD"), "PROMPT_LOOKUP": validator("prompt_lookup", "PROMPT_LOOKUP")}
    return {name: found[name] for name in sorted(algorithms, key=list(found).index)}


@pytest.mark.sglang  # the example drafters of tests/examples.toml are installed with SGLang's environment
def test_check_good_file_resolves_widths(cli):
    status, out, _ = cli("check", EXAMPLES, "-n", "16", "--disable-overlap-schedule", "--json")
    data = json.loads(out)
    refused = list(schema_refusals().values())
    assert (status, data["ok"], data["problems"]) == ((1, False, refused) if refused else (0, True, [])), data["problems"]
    assert data["algorithms"]["SBD"]["widths"]["16"] == {"target": 8, "max": 16}  # its draft worker never verifies
    assert data["algorithms"]["DFLASH_BLOCK"]["widths"]["16"] == {"target": 16, "draft": 16, "max": 16}
    from importlib import metadata

    assert data["sglang"]["version"] == metadata.version("sglang")
    assert len(data["fingerprint"]) == 16


def test_check_lists_every_problem_and_fails(cli, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[plugins]\non_error = 'maybe'\nenable = ['sbd']\ndisable = ['sbd']\n[algorithms.EAGLE]\n")
    status, _, err = cli("check", bad)
    assert status == 1
    assert f"error: {bad}: [plugins] on_error must be one of 'fail', 'skip', got 'maybe'" in err
    assert f"error: {bad}: [plugins] plugin 'sbd' is in both enable and disable" in err
    assert f"error: {bad}: [algorithms.EAGLE] 'EAGLE' is a built-in SGLang algorithm name" in err


@pytest.mark.sglang
def test_check_reports_bad_widths(cli, tmp_path):
    cfg = tmp_path / "narrow.toml"
    cfg.write_text("[algorithms.SBD]\nmax_tokens_per_req = 16\nverify_width = 32\n")
    status, _, err = cli("check", cfg, "-n", "16")
    assert status == 1
    assert ("plugin 'sbd' (sglang-spec-example-sbd==0.1.0): algorithm SBD: "
            "sgl_spec_verify_width(num_draft_tokens=16, is_draft_worker=False) returned 32") in err


@pytest.mark.sglang
def test_check_predicts_sglangs_refusals(cli, tmp_path):
    """The release's overlap rule, and the start-up check of a draft model against the block, as SGLang applies them."""
    from sglang_spec_plugins.testing.draft_checkpoint import dflash_draft
    from sglang_spec_plugins.testing.scheduler_start import TINY_LLAMA

    draft = dflash_draft(tmp_path / "draft", TINY_LLAMA, block_size=16, mask_token_id=3, target_layer_ids=[0])
    status, out, _ = cli("check", EXAMPLES, "-n", "8", "--speculative-draft-model-path", draft, "--json")
    problems = json.loads(out)["problems"]
    assert status == 1
    if schema_refusals():  # before 0.5.14 the draft model is not examined: the algorithm is refused whole
        assert schema_refusals()["DFLASH_BLOCK"] in problems, problems
        return
    block = ("plugin 'dflash_block' (sglang-spec-example-dflash-block==0.1.0): algorithm DFLASH_BLOCK: "
             f"{draft / 'config.json'} dflash_config.block_size = 16: the draft runner drafts blocks of 8 at "
             "--speculative-num-draft-tokens 8; serve it with --speculative-num-draft-tokens 16")
    assert block in problems, problems
    mode = json.loads(out)["sglang"]["modes"]["DFLASH_BLOCK"]
    release = json.loads(out)["sglang"]["version"]
    if Version("0.5.14") <= Version(release) < Version("0.5.15"):  # its overlap FutureMap decides for DFLASH alone
        assert mode == {"overlap": False, "why": f"refused: SGLang {release}'s overlap scheduler decides for DFLASH "
                                                 "alone (see the problems); --disable-overlap-schedule runs it synchronously"}
        assert any("managers/overlap_utils.py:" in p and p.endswith("start SGLang with --disable-overlap-schedule "
                   "(releases without these sites serve it overlapped)") for p in problems), problems
    else:
        assert mode == {"overlap": True,
                        "why": "overlapped: supports_overlap=True and SGLang's overlap scheduler (its default)"}


@pytest.mark.sglang
def test_check_says_a_synchronous_drafter_needs_the_flag_and_runs_synchronously(cli, site, tmp_path):
    """A plugin that still declares supports_overlap=False: refused with overlap left on where the release refuses
    it (0.5.12+), served synchronously with --disable-overlap-schedule; check says which and why."""
    from sglang_spec_plugins.engine.worker_contract import contract

    site.add("sync-drafter", {"sync": "sync_mod"}, {"sync_mod": simple_plugin("SYNC", width="2")})
    (tmp_path / "sync.toml").write_text("[plugins]\nenable = ['sync']\n")
    status, out, _ = cli("check", tmp_path / "sync.toml", "-n", "4", "--single-process", "--json")
    data = json.loads(out)
    if contract().overlap_refused:
        assert status == 1
        assert any(p.startswith("plugin 'sync' (sync-drafter==1.0): algorithm SYNC: supports_overlap=False: SGLang ")
                   and p.endswith("refuses to start it without --disable-overlap-schedule") for p in data["problems"])
    assert data["sglang"]["modes"]["SYNC"]["overlap"] is False
    _, out, _ = cli("check", tmp_path / "sync.toml", "-n", "4", "--single-process", "--disable-overlap-schedule", "--json")
    assert json.loads(out)["sglang"]["modes"]["SYNC"] == {"overlap": False,
                                                         "why": "synchronous: --disable-overlap-schedule"}


@pytest.mark.sglang
def test_check_says_which_attention_backend_refuses_the_width(cli):
    """SBD verifies 8 tokens at ndt 16: FA3 lays the target worker out at ndt."""
    status, out, _ = cli("check", EXAMPLES, "-n", "16", "--disable-overlap-schedule", "--attention-backend", "fa3", "--json")
    data = json.loads(out)
    assert status == 1
    sbd, block = data["sglang"]["backends"]["SBD"]["16"], data["sglang"]["backends"]["DFLASH_BLOCK"]["16"]
    assert list(sbd) == ["target worker"] and list(block) == ["target worker", "draft worker"]  # DFLASH_BLOCK's draft verifies
    assert sbd["target worker"]["fa3"]["verdict"] == "refused"
    assert block["target worker"]["fa3"]["verdict"] == "served"
    if schema_refusals():  # before 0.5.14 SBD's release check refuses it first: the backend is not reached
        assert schema_refusals()["SBD"] in data["problems"], data["problems"]
        assert [p for p in data["problems"] if "--attention-backend" in p] == [], data["problems"]
        return
    assert [p for p in data["problems"] if "--attention-backend" in p] == [
        "plugin 'sbd' (sglang-spec-example-sbd==0.1.0): algorithm SBD: --attention-backend fa3 on the target worker at width 8 "
        f"(chain, ndt 16) on SGLang {data['sglang']['version']} is refused: " + sbd["target worker"]["fa3"]["reason"]]


def test_check_compares_answers_with_a_fresh_process(cli, drafters, tmp_path):
    """A width that is stable within a process but differs between processes (as between TP ranks): the
    module counts its imports, this process's is the first and check's fresh process's the second."""
    counter = tmp_path / "imports"
    source = simple_plugin("RANKED", width="WIDTH").replace(
        "class Worker:", f"import pathlib\n_c = pathlib.Path({str(counter)!r})\n_c.write_text(_c.read_text() + 'x' if _c.exists() else 'x')\n"
                         "WIDTH = len(_c.read_text())\n\nclass Worker:")
    drafters.add("ranked-drafter", {"ranked": "ranked_mod"}, {"ranked_mod": source})
    cfg = tmp_path / "ranked.toml"
    cfg.write_text("[plugins]\nenable = ['ranked']\n")
    status, _, err = cli("check", cfg, "-n", "4")
    assert status == 1
    assert ("algorithm RANKED (plugin ranked): a fresh process got other widths ({'4': {'target': 2, 'max': 4}} "
            "instead of {'4': {'target': 1, 'max': 4}}): its answers depend on the process") in err


@pytest.mark.parametrize("config", ["good", "bad"])
def test_list_json_into_a_closed_pipe_says_nothing(monkeypatch, tmp_path, config):
    """The reader leaves after 10 bytes; with a config problem too, no traceback."""
    if config == "bad":
        (tmp_path / "bad.toml").write_text("[plugins]\non_error = 'maybe'\n")
        monkeypatch.setenv("SGLANG_SPEC_PLUGINS_CONFIG", str(tmp_path / "bad.toml"))
    reader = "python3 -c 'import sys, time; sys.stdout.write(sys.stdin.read(10)); sys.stdout.flush(); sys.stdin.close()'"
    # a subprocess: its standard output is a pipe the reader closes
    out = subprocess.run(f"{EXE} list --json | {reader}", shell=True, capture_output=True, text=True, timeout=120)
    assert out.stderr == "" and out.stdout.startswith("{")


@pytest.mark.parametrize("command", ["list", "check"])
def test_unreadable_config_is_a_json_problem_not_a_traceback(cli, monkeypatch, tmp_path, command):
    bad = tmp_path / "plugins.toml"
    bad.write_bytes(b"[plugins]\non_error = '\xff'\n")
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS_CONFIG", str(bad))
    status, out, err = cli(command, "--json")
    assert status == 1 and "Traceback" not in err
    assert json.loads(out) == {"ok": False, "problems": [f"{bad}: not UTF-8 text: byte 0xff at line 2, column 13"]}


def test_check_missing_file(cli, tmp_path):
    status, _, err = cli("check", tmp_path / "none.toml")
    assert status == 1 and "none.toml: no such file" in err


CPU_HARNESS = ("CPU harness: torch {torch} has no GPU, so SGLang was imported with stand-ins for torchvision::nms and "
               "torchvision::qnms (torchvision's CUDA build cannot load on it); the verdicts below are read off the real "
               "SGLang source, no kernel ran")


@pytest.mark.sglang
def test_check_in_the_quickstart_venv_gives_sglang_verdicts(monkeypatch):
    """What a newcomer runs after examples/quickstart.sh, in the repository root: plain `check` of the
    bundled plugins.toml, fresh-process comparison included, SGLang's verdicts read on the CPU harness,
    and the output says so."""
    import torch
    from importlib import metadata

    monkeypatch.delenv("SGLANG_SPEC_PLUGINS_CONFIG")
    # a subprocess: the installed console script in a fresh interpreter, SGLang first imported by check itself
    out = run("check", "-n", "4", "--disable-overlap-schedule", cwd=ROOT)
    if Version(metadata.version("sglang")) < Version("0.5.14"):  # PROMPT_LOOKUP's own validator: the V2 schema only
        assert out.returncode == 1 and "PROMPT_LOOKUP drives SGLang's V2 speculative schema (SGLang 0.5.14+)" in out.stderr
        return
    assert out.returncode == 0, out.stderr
    assert CPU_HARNESS.format(torch=torch.__version__) in out.stdout
    assert f"SGLang: {metadata.version('sglang')}: can serve plugin algorithms" in out.stdout
    assert "ndt=4: target 4, max 4, target widths by batch size {1 = 4, 8 = 2}" in out.stdout
    assert "PROMPT_LOOKUP at ndt=4, target worker, fa3: refused" in out.stdout  # why the quick start names flashinfer
    assert out.stdout.rstrip().endswith("ok")


@pytest.mark.sglang
def test_doctor_in_the_quickstart_venv(cli, monkeypatch):
    import torch
    from importlib import metadata

    monkeypatch.delenv("SGLANG_SPEC_PLUGINS_CONFIG")
    monkeypatch.chdir(ROOT)
    status, out, _ = cli("doctor", "--json")
    data = json.loads(out)
    assert status == 0, data
    assert data["sglang"]["version"] == metadata.version("sglang")
    assert data["sglang"]["cpu_harness"] == CPU_HARNESS.format(torch=torch.__version__)
    assert data["sglang"]["algorithm_registry"] is True and data["sglang"]["plugin_framework"] is True
    assert data["would_register"] == ["PROMPT_LOOKUP"]


@pytest.mark.sglang
def test_doctor_reports_a_broken_sglang_install(monkeypatch, tmp_path):
    """An SGLang whose speculative modules do not import: doctor says why, not "no"."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['sglang.srt.speculative.spec_info'] = None\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    # a subprocess: a fresh interpreter whose SGLang breaks at start (this one's imported it, its probe is cached)
    out = run("doctor")
    assert out.returncode == 1
    assert "  import failed: ModuleNotFoundError: import of sglang.srt.speculative.spec_info halted; None in sys.modules" in out.stdout
    assert "plugin framework" not in out.stdout


@pytest.mark.parametrize("value", ["0", "-3", "x"])
def test_check_num_draft_tokens_below_one_is_a_usage_error(cli, value):
    status, out, err = cli("check", "-n", value)
    assert status == 2 and out == ""
    assert "sglang-spec-plugins check: error: argument --num-draft-tokens/-n: " in err
    assert ("is not a speculative_num_draft_tokens: it must be 1 or more" if value != "x" else "'x' is not an integer") in err


@pytest.mark.sglang
def test_check_flags_an_unknown_attention_backend(cli):
    status, out, _ = cli("check", "-n", "16", "--disable-overlap-schedule", "--attention-backend", "fa5", "--single-process", "--json")
    data = json.loads(out)
    assert status == 1
    assert [p for p in data["problems"] if "fa5" in p][0].startswith(
        f"--attention-backend fa5: SGLang {data['sglang']['version']} has no such attention backend (it accepts: ")


@pytest.mark.sglang
def test_check_prints_no_draft_width_where_the_draft_worker_may_not_verify(cli):
    _, out, _ = cli("check", "-n", "16", "--disable-overlap-schedule", "--single-process")
    assert "algorithm SBD (plugin sbd): draft-may-verify=False; ndt=16: target 8, max 16" in out
    assert "algorithm DFLASH_BLOCK (plugin dflash_block): draft-may-verify=True; ndt=16: target 16, draft 16, max 16" in out


def test_output_of_plugins_and_sglang_at_import_stays_off_json(cli, drafters, monkeypatch, tmp_path):
    """A plugin that prints while imported: `check --json` and `list --json` still print one JSON document.
    (Writes to the process's own standard output, fd 1 and ``sys.__stdout__``, are checked in a process of
    its own: tests/on_sglang/test_plugin_code_in_a_process.py.)"""
    drafters.add("loud-drafter", {"loud": "loud_mod"}, {"loud_mod": "print('hello from loud_mod')\n" + simple_plugin("LOUD", width="2")})
    (tmp_path / "loud.toml").write_text("[plugins]\nenable = ['loud']\n")
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS_CONFIG", str(tmp_path / "loud.toml"))
    for command in (["list", "--json"], ["check", "-n", "4", "--disable-overlap-schedule", "--json"]):
        monkeypatch.delitem(sys.modules, "loud_mod", raising=False)  # imported anew, as by each command's own process
        _, out, err = cli(*command)
        assert json.loads(out)["algorithms"]["LOUD"]["plugin"] == "loud", out
        assert "hello from loud_mod" in err


@pytest.mark.sglang
def test_doctor_says_when_sglang_will_not_start_the_loader(cli, monkeypatch):
    monkeypatch.setenv("SGLANG_PLUGINS", "some_other_plugin")
    status, out, _ = cli("doctor", "--json")
    data = json.loads(out)
    assert status == 1 and data["would_register"] == []
    assert ("SGLANG_PLUGINS=some_other_plugin leaves out sglang_spec_plugins: SGLang will not start the loader, "
            "so no plugin algorithm is registered; add it to the list") in data["problems"]


@pytest.mark.sglang
def test_doctor_fingerprint_is_the_same_in_every_process(cli):
    # two processes, each with its own hash seed: this one and the console script in a subprocess
    prints = {json.loads(cli("doctor", "--json")[1])["fingerprint"], json.loads(run("doctor", "--json").stdout)["fingerprint"]}
    assert len(prints) == 1 and len(next(iter(prints))) == 16


def test_package_and_list_work_without_sglang(tmp_path):
    """No SGLang and no torch on the path: only this package, pluggy and a plugin."""
    lib = tmp_path / "lib"
    lib.mkdir()
    if sys.version_info < (3, 11):  # the package's one other dependency there; -S hides site-packages
        import tomli

        modules = (pluggy, tomli)
    else:
        modules = (pluggy,)
    for module in modules:
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
    # a subprocess: a fresh interpreter without site-packages, so without SGLang and torch
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(lib), "PATH": os.environ.get("PATH", "")}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "SOLO             plugin solo (solo-drafter==1.0)" in out.stdout
    assert "    (no loaded plugin implements it)" in out.stdout and "-==-" not in out.stdout  # sgl_spec_draft_may_verify
    assert "SGLang: not installed" in out.stdout
    assert "RC 0 1" in out.stdout


@pytest.mark.parametrize("name, message", [
    ("eagle", "'eagle' would make the algorithm 'EAGLE', a built-in SGLang algorithm name"),
    ("import", "'import' would make a module named 'import', which Python already uses"),
    ("json", "'json' would make a module named 'json', which Python already uses"),
    ("sglang_spec_plugins", "'sglang_spec_plugins' would make the distribution 'sglang-spec-plugins' and the module "
                            "'sglang_spec_plugins', which SGLang and sglang-spec-plugins run with: `pip install -e .` would replace it"),
    ("sglang", "'sglang' would make the distribution 'sglang' and the module 'sglang', which SGLang and sglang-spec-plugins run with"),
    ("iniconfig", "'iniconfig' would make the distribution 'iniconfig' and the module 'iniconfig', which is already "
                  "installed here (iniconfig)"),
    ("hypothesis", "'hypothesis' would make the distribution 'hypothesis' and the module 'hypothesis', which is already "
                   "installed here (hypothesis)"),
])
def test_new_refuses_names_that_cannot_work(cli, tmp_path, name, message):
    status, _, err = cli("new", name, "--dir", tmp_path)
    assert status == 1 and f"error: {message}" in err
    assert not (tmp_path / name).exists()


def test_new_in_the_working_directory_through_python_m(tmp_path):
    """``python -m`` puts the working directory on sys.path: the package just written there is importable."""
    # a subprocess: `python -m` itself, started in that directory
    out = subprocess.run([sys.executable, "-m", "sglang_spec_plugins", "new", "cwd_drafter"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0 and "error" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert "wrote cwd_drafter (distribution cwd-drafter, plugin cwd_drafter, algorithm CWD_DRAFTER)" in out.stdout + out.stderr
    assert (tmp_path / "cwd_drafter" / "cwd_drafter" / "worker.py").is_file()


def test_new_into_a_directory_it_cannot_write(cli):
    status, _, err = cli("new", "mydraft", "--dir", "/proc/no-such-dir")
    assert status == 1 and "Traceback" not in err
    assert "error: cannot write the package into /proc/no-such-dir: " in err


def test_a_generator_from_sgl_spec_algorithms_is_reported_once(cli, drafters, tmp_path):
    """Its repr differs in every process; the fresh-process comparison must not report it again."""
    source = simple_plugin("GEN").replace("return [AlgorithmSpec(", "return (s for s in [AlgorithmSpec(").replace("Worker)]", "Worker)])")
    drafters.add("gen-drafter", {"gen": "gen_mod"}, {"gen_mod": source})
    (tmp_path / "gen.toml").write_text("[plugins]\nenable = ['gen']\n")
    status, out, _ = cli("check", tmp_path / "gen.toml", "--json")
    assert status == 1
    assert json.loads(out)["problems"] == [
        "plugin 'gen' (gen-drafter==1.0): sgl_spec_algorithms must return a list of AlgorithmSpec, got a generator "
        "(it is consumed once; return a list)"]


def test_plain_check_finds_a_wrong_case_width_hook(cli, site, tmp_path):
    """No -n: the widths are still asked, at every default ndt the algorithm accepts."""
    source = simple_plugin("Lower") + (
        "\n@hookimpl\ndef sgl_spec_verify_width(algorithm, num_draft_tokens):\n"
        "    return 2 if algorithm == 'lower' else None\n")
    site.add("lower-drafter", {"lower": "lower_mod"}, {"lower_mod": source})
    (tmp_path / "lower.toml").write_text("[plugins]\nenable = ['lower']\n")
    status, _, err = cli("check", tmp_path / "lower.toml", "--single-process")
    assert status == 1
    assert ("error: plugin 'lower' (lower-drafter==1.0): algorithm LOWER: sgl_spec_verify_width(num_draft_tokens=1, "
            "is_draft_worker=False) returned None for its own algorithm LOWER; hooks receive the name upper case") in err
    assert "(found at a default ndt; `check -n 1` shows it alone)" in err


@pytest.mark.sglang
def test_check_reports_widths_by_batch_and_their_backends(cli, tmp_path):
    cfg = tmp_path / "adaptive.toml"
    cfg.write_text("[plugins]\nenable = ['sbd']\n[algorithms.SBD]\nmax_tokens_per_req = 16\n"
                   "widths_by_batch_size = {1 = 16, 8 = 8, 64 = 4}\n")
    _, out, _ = cli("check", cfg, "-n", "16", "--json", "--single-process")
    data = json.loads(out)
    widths = data["algorithms"]["SBD"]["widths"]["16"]
    assert widths["target_widths_by_batch_size"] == {"1": 16, "8": 8, "64": 4} and widths["target"] == 16
    verdicts = data["sglang"]["backends"]["SBD"]["16"]["target worker"]
    assert verdicts["fa3"]["verdict"] == "refused" and verdicts["fa3"]["reason"].startswith("at width 4: ")
    assert verdicts["trtllm_mha"]["reason"].startswith("at widths 4, 8, 16: ") and verdicts["trtllm_mha"]["verdict"] != "refused"
    served = ("flashinfer", "triton", "aiter") if Version(data["sglang"]["version"]) >= Version("0.5.17") else ("flashinfer", "aiter")
    for backend in served:  # triton lays every TARGET_VERIFY out at ndt up to 0.5.16
        assert verdicts[backend]["reason"].startswith("at widths 4, 8, 16: ") and verdicts[backend]["verdict"] != "refused"
    if "triton" not in served:
        assert verdicts["triton"] == {"verdict": "refused", "reason": "at width 4: lays TARGET_VERIFY out at "
                                      "speculative_num_draft_tokens (refused at start-up)", "runs_on": "triton"}, \
            verdicts["triton"]
    assert verdicts["aiter_mla"]["verdict"] == "refused" and verdicts["aiter_mla"]["reason"].startswith("at width 4: ")
    text = cli("check", cfg, "-n", "16", "--single-process")[1]
    assert "target 16, max 16, target widths by batch size {1 = 16, 8 = 8, 64 = 4}" in text and "draft widths" not in text


@pytest.mark.sglang  # enables the example drafter prompt_lookup
def test_check_counts_the_cuda_graphs_of_widths_to_choose_from(cli, tmp_path):
    cfg = tmp_path / "choose.toml"
    cfg.write_text("[plugins]\nenable = ['prompt_lookup']\n[algorithms.PROMPT_LOOKUP]\nmax_tokens_per_req = 16\n"
                   "widths_by_batch_size = {1 = [4, 8, 16], 8 = [2, 4], 64 = [1, 2]}\nwidths_by_acceptance = {margin = 0.05}\n")
    args = ("check", cfg, "-n", "16", "--single-process", "--disable-overlap-schedule", "--cuda-graph-bs", "1", "8", "64",
            "--vocab-size", "1000")
    data = json.loads(cli(*args, "--json")[1])
    refused = list(schema_refusals(algorithms=["PROMPT_LOOKUP"]).values())
    assert (data["ok"], data["problems"]) == (not refused, refused), data["problems"]
    entry = data["algorithms"]["PROMPT_LOOKUP"]
    assert entry["widths_by_acceptance"]["margin"] == 0.05 and entry["widths_by_acceptance"]["interval_steps"] == 4
    widths = entry["widths"]["16"]
    assert widths["target_widths_by_batch_size"] == {"1": [4, 8, 16], "8": [2, 4], "64": [1, 2]}
    assert widths["target_chosen_by"] == "acceptance controller"
    # size 1 at 4, 8, 16; size 8 at 2, 4; size 64 at 1, 2
    assert widths["target_cuda_graphs"] == {"capture_sizes": [1, 8, 64], "graphs": 7, "logit_rows": 28 + 48 + 192,
                                            "logit_bytes": 268 * 1000 * 4}
    text = cli(*args)[1]
    assert ("target widths by batch size {1 = [4, 8, 16], 8 = [2, 4], 64 = [1, 2]} (each step's width chosen by the "
            "acceptance controller) (7 CUDA graphs over --cuda-graph-bs 1 8 64, 268 logit rows (0.00 GiB))") in text


@pytest.mark.sglang  # enables the example drafters
@pytest.mark.parametrize("enable, table, chosen_by, text", [
    ("sbd", "[algorithms.SBD]\nmax_tokens_per_req = 8\nwidths_by_batch_size = {1 = [2, 4, 8], 8 = 4}\n", "worker",
     "target widths by batch size {1 = [2, 4, 8], 8 = 4} (each step's width chosen by the worker)"),
    ("prompt_lookup", "[algorithms.PROMPT_LOOKUP]\nmax_tokens_per_req = 8\nwidths_by_batch_size = {1 = [2, 4, 8], 8 = 4}\n",
     "nobody", "target widths by batch size {1 = [2, 4, 8], 8 = 4} (each step at its bucket's largest: nobody chooses)"),
    ("prompt_lookup", "[algorithms.PROMPT_LOOKUP]\nmax_tokens_per_req = 8\nwidths_by_batch_size = {1 = 8, 8 = 4}\n",
     None, "target widths by batch size {1 = 8, 8 = 4}\n"),
], ids=["the worker picks", "nobody chooses", "one width a bucket"])
def test_check_says_who_chooses_a_steps_width_among_its_buckets(cli, tmp_path, enable, table, chosen_by, text):
    """Where a bucket gives several widths, check says who chooses among them (SBD's worker picks its own,
    AlgorithmSpec picks_widths; PROMPT_LOOKUP's steps without a controller take the bucket's largest)."""
    cfg = tmp_path / "choose.toml"
    cfg.write_text(f"[plugins]\nenable = ['{enable}']\n" + table)
    args = ("check", cfg, "-n", "4", "--single-process", "--disable-overlap-schedule")
    data = json.loads(cli(*args, "--json")[1])
    assert data["algorithms"][enable.upper()]["widths"]["4"].get("target_chosen_by") == chosen_by, data
    assert text in cli(*args)[1]


@pytest.mark.sglang  # enables the example drafter prompt_lookup
def test_check_refuses_the_controller_without_widths_to_choose_from(cli, tmp_path):
    cfg = tmp_path / "none.toml"
    cfg.write_text("[plugins]\nenable = ['prompt_lookup']\n[algorithms.PROMPT_LOOKUP]\nmax_tokens_per_req = 16\n"
                   "widths_by_batch_size = {1 = 16, 8 = 8}\nwidths_by_acceptance = true\n")
    data = json.loads(cli("check", cfg, "-n", "16", "--single-process", "--json")[1])
    assert not data["ok"]
    assert any("widths_by_acceptance in " in p and "chooses each step's width among its batch-size bucket's widths" in p
               for p in data["problems"]), data["problems"]


@pytest.mark.sglang
def test_check_looks_up_no_model_for_the_placeholder_model_path(cli, monkeypatch, tmp_path):
    """Without --model-path, check's ServerArgs carry a placeholder: DFLASH_BLOCK's checks of the target (its
    config against the draft's, the sites that ask whether it is hybrid) read no config for it (on the hub, a
    request retried for ~20 s without a network); a --model-path given is read, where the release builds its
    ServerArgs here (0.5.16 on a CPU builds none for a hub id, "No accelerator": check says it did not run them)."""
    from types import SimpleNamespace

    from transformers import AutoConfig

    from sglang_spec_plugins.engine.dflash_sites import summary
    from sglang_spec_plugins.testing.draft_checkpoint import dflash_draft
    from sglang_spec_plugins.testing.scheduler_start import TINY_LLAMA

    asked = []
    monkeypatch.setattr(AutoConfig, "from_pretrained", lambda path, **kwargs: asked.append(path) or SimpleNamespace(to_dict=dict))

    def check(*args):
        """check's report, and whether it built the release's ServerArgs for DFLASH_BLOCK."""
        _, out, _ = cli("check", "-n", "16", "--disable-overlap-schedule", "--single-process", "--json", *args)
        data = json.loads(out)
        return data, not any("ServerArgs could not be built here" in line and "DFLASH_BLOCK" in line
                             for line in data["sglang"]["lines"])

    data, _ = check()
    if schema_refusals():  # before 0.5.14 DFLASH_BLOCK is refused whole: no draft-model check reads a config
        assert data["problems"] == list(schema_refusals().values()) and asked == [], (asked, data["problems"])
        check("--model-path", "org/target")
        assert asked == [], asked
        return
    assert data["ok"] and asked == [], (asked, data["problems"])
    _, built = check("--model-path", "org/target")
    assert asked == (["org/target"] if built and "hybrid_target" in summary().get("refused", {}) else []), asked
    asked.clear()
    draft = dflash_draft(tmp_path / "draft", TINY_LLAMA, block_size=16, mask_token_id=3, target_layer_ids=[0])
    check("--speculative-draft-model-path", draft)
    assert asked == [], asked
    _, built = check("--speculative-draft-model-path", draft, "--model-path", "org/target")
    assert ("org/target" in asked) == built, (asked, built)


@pytest.mark.sglang  # enables the example drafter sbd
def test_check_runs_a_validator_that_reads_its_settings_through_policy_for(cli, tmp_path):
    """SBD's validate_server_args reads its settings through policy_for, which in a server answers for the
    registered algorithm: check answers it with its own policy, so a mask token outside the --model-path
    target's vocabulary is refused naming the key, and a valid one passes (it was refused as "Unknown
    speculative algorithm name: SBD", which the server never says)."""
    from sglang_spec_plugins.testing.scheduler_start import TINY_LLAMA

    if "SBD" in schema_refusals():
        pytest.skip(f"SBD's validator refuses this release first: {schema_refusals()['SBD']}")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_LLAMA))
    for mask, refused in ((TINY_LLAMA["vocab_size"], True), (3, False)):
        cfg = tmp_path / f"mask{mask}.toml"
        cfg.write_text(f"[plugins]\nenable = ['sbd']\n[algorithms.SBD]\nmask_token_id = {mask}\n")
        data = json.loads(cli("check", cfg, "-n", "4", "--single-process", "--disable-overlap-schedule", "--model-path",
                              model, "--json")[1])
        unbuilt = [line for line in data["sglang"]["lines"] if "ServerArgs could not be built here" in line]
        if unbuilt:  # 0.5.16 on a CPU builds none with a model path ("No accelerator"): check says it did not run them
            pytest.skip(unbuilt[0])
        problems = data["problems"]
        if refused:
            assert [p.split(": ValueError: ")[-1] for p in problems] == [
                f"[algorithms.SBD] mask_token_id = {mask}: it must be an int in [0, {mask}), a token id of the target's "
                "vocabulary"], problems
        else:
            assert problems == [], problems
