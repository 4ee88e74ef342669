"""Every bad input in bad_inputs.CASES, through SGLang's own load_plugins()
and through ``sglang-spec-plugins check``: the message names its source, and
nothing stays registered or patched. Then what ``on_error = "skip"`` keeps."""

import dataclasses
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from importlib import metadata
from packaging.version import Version

from bad_inputs import BAD, CASES, SKIPPING, Case, check_flags, expected, prepare, resolve_server_args
from sglang_spec_plugins.testing.cpu import reset_plugin_state, run_sglang_plugin_loading
from sglang_spec_plugins import cli
from patch_state import assert_unchanged, assert_untouched, importable_targets, plugin_algorithms, snapshot
from sglang_spec_plugins.errors import SpecPluginError, StartupRefused

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def patch_targets():
    return importable_targets()


@pytest.fixture
def case_env(site, tmp_path, monkeypatch):
    """``setup(case)`` installs the case and sets its environment; returns the expected message."""
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)

    def setup(case: Case) -> str:
        if case.since and Version(metadata.version("sglang")) < Version(case.since):
            pytest.skip(f"applies from SGLang {case.since}")
        if case.until and Version(metadata.version("sglang")) > Version(case.until):
            pytest.skip(f"applies up to SGLang {case.until}")
        if case.gpu == "sm90":  # every SGLang module holding the probe (server_args imports it by name up to 0.5.18)
            import sglang.srt.server_args  # noqa: F401
            from sglang.srt.utils import common

            probe = common.is_sm90_supported
            for module in [m for name, m in sys.modules.items() if name.startswith("sglang.srt") and m is not None]:
                if getattr(module, "is_sm90_supported", None) is probe:
                    monkeypatch.setattr(module, "is_sm90_supported", lambda: True)
        for key, value in prepare(case, tmp_path, site).items():
            monkeypatch.setenv(key, value)
        return expected(case, tmp_path)

    reset_plugin_state()
    yield setup
    reset_plugin_state()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_sglang_load_plugins_refuses_naming_the_source(case, case_env, patch_targets):
    """Every case, where SGLang meets it: its plugin loading, or the resolution of its server arguments, or
    the widths at a num_draft_tokens. After the refusal SGLang holds exactly what it held before the refused
    step: nothing registered or patched after a refused load, the loaded algorithms and patches unchanged
    after a refused resolution."""
    message = case_env(case)
    if case.ndt is None and case.start is None:
        with pytest.raises(StartupRefused) as info:
            run_sglang_plugin_loading()
        assert re.search(message, str(info.value.cause)), str(info.value.cause)
        assert_untouched(patch_targets)
        return
    run_sglang_plugin_loading()
    before = snapshot(patch_targets)
    with pytest.raises(SpecPluginError) as info:
        if case.start is not None:  # SGLang resolves its server arguments: our validate_server_args refuses there
            resolve_server_args(**case.start)
        else:  # the widths at one num_draft_tokens, as SGLang asks while it resolves its arguments
            from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

            SpeculativeAlgorithm.from_string(case.algorithm).handle_server_args(
                types.SimpleNamespace(speculative_num_draft_tokens=case.ndt))
    assert re.search(message, str(info.value)), str(info.value)
    if case.start is not None:
        assert "(found while SGLang resolved its server arguments, before loading any weights)" in str(info.value)
    assert_unchanged(before, patch_targets, f"the refusal of {case.id!r}")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_check_reports_it(case, case_env, capsys, patch_targets):
    message = case_env(case)
    before = snapshot(patch_targets)
    argv = ["check", "--json", "--single-process"] + check_flags(case)
    assert cli.main(argv) == 1
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert report["ok"] is False
    assert any(re.search(message, line) for line in ["\n".join(report["problems"])] + report["problems"]), report["problems"]
    assert out.err == ""
    assert_unchanged(before, patch_targets, f"check's report of {case.id!r}")


def test_trtllm_mha_on_sm90_starts_from_0_5_21(case_env, capsys):
    """0.5.21+ hands XQA its spec-decode mask: the SM90 trtllm_mha case above
    resolves its server arguments and passes ``check`` there."""
    case = next(c for c in CASES if c.gpu == "sm90")
    if Version(metadata.version("sglang")) <= Version(case.until):
        pytest.skip(f"refused up to SGLang {case.until}")
    case_env(dataclasses.replace(case, until=None))
    run_sglang_plugin_loading()
    resolve_server_args(**case.start)
    assert cli.main(["check", "--json", "--single-process"] + check_flags(case)) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["sglang"]["backends"]["BAD"]["4"]["target worker"]["trtllm_mha"]["verdict"] != "refused"


FRESH = ["not utf-8", "sys.exit at import", "local file dangling link"]


@pytest.mark.parametrize("case", [c for c in CASES if c.id in FRESH], ids=FRESH)
def test_in_a_fresh_sglang_process(case, site, tmp_path):
    """As a server process meets it: SGLang's load_plugins() stops the process with our message."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SPEC_PLUGINS") and k != "SGLANG_PLUGINS"}
    env.update(prepare(case, tmp_path, site))
    env["PYTHONPATH"] = os.pathsep.join([str(site.path), str(ROOT / "tests")] + sys.path)
    code = (
        "from sglang_spec_plugins.testing.cpu import install_stand_ins; install_stand_ins()\n"
        "import sglang.srt.plugins as p\n"
        "from sglang.srt.speculative import spec_registry\n"
        "try:\n    p.load_plugins()\n"
        "finally:\n    print('REGISTERED', sorted(spec_registry._REGISTRY))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-3000:]
    assert re.search(expected(case, tmp_path), out.stderr), out.stderr[-3000:]
    assert "sglang-spec-plugins refused to start" in out.stderr
    assert "SBD" not in out.stdout and "REGISTERED" in out.stdout


CLI_CASES = ["pytest.skip at import", "BaseException from algorithms", "BaseException from the draft hook"]


@pytest.mark.parametrize("case", [c for c in CASES if c.id in CLI_CASES], ids=CLI_CASES)
@pytest.mark.parametrize("command", ["list", "check"])
def test_cli_reports_it_without_a_traceback(case, command, site, tmp_path):
    """``list`` and ``check`` as an operator runs them: exit 1, the message, no
    traceback (``list`` asks no per-algorithm hook, so only the load faults)."""
    import os

    if command == "list" and "hook" in case.id:
        pytest.skip("list does not ask per-algorithm hooks")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SPEC_PLUGINS")}
    env.update(prepare(case, tmp_path, site))
    env["PYTHONPATH"] = os.pathsep.join([str(site.path)] + sys.path)
    argv = [sys.executable, "-m", "sglang_spec_plugins", command] + (["--single-process"] if command == "check" else [])
    out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    assert re.search(expected(case, tmp_path), out.stderr), out.stderr
    assert "Traceback" not in out.stdout + out.stderr


# --- on_error = "skip": exactly the faulty plugin goes, all of it ---

SKIP_CASES = {  # what the faulty plugin does -> its file, bad_plugins/<file>.py
    "draft hook raises for its own algorithm": "draft_hook_raises_for_its_own_algorithm",
    "draft hook answers for every algorithm": "draft_answers_for_every_algorithm",
    "width hook raises for other algorithms": "width_hook_raises_for_other_algorithms",
    "exits at import": "exits_at_import",
    "pytest.skip at import": "skips_at_import",
    "BaseException from a hook": "baseexception_from_the_draft_hook",
    "wrapper": "new_style_wrapper",
    "draft hook raises what cannot be shown": "draft_hook_raises_what_cannot_be_shown",
    "import raises what cannot be shown": "import_raises_weird",
    "algorithms whose iteration raises": "algorithms_whose_iteration_raises",
}


@pytest.mark.parametrize("file", SKIP_CASES.values(), ids=list(SKIP_CASES))
def test_skip_drops_exactly_the_faulty_plugin(file, case_env, caplog):
    case_env(Case("skip", "", SKIPPING, {"bad": file}))
    run_sglang_plugin_loading()
    assert plugin_algorithms() == ["DFLASH_BLOCK", "SBD"]
    assert re.search(r"skipped plugin bad \(on_error = \"skip\"\): plugin 'bad' \(bad-drafter==1.0\)", caplog.text)
    from sglang_spec_plugins import loader

    assert [p.name for p in loader.load().plugins.plugins] == ["dflash_block", "sbd"]
    assert loader.load().plugins.pm.get_plugin("bad") is None


@pytest.mark.parametrize("file", SKIP_CASES.values(), ids=list(SKIP_CASES))
def test_doctor_shows_what_skip_registers(file, case_env, capsys):
    """doctor says what the loader registers under skip, and names the skipped plugin."""
    case_env(Case("skip", "", SKIPPING, {"bad": file}))
    assert cli.main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["would_register"] == ["DFLASH_BLOCK", "SBD"]
    assert [p for p in report["problems"] if "bad" in p] == [p for p in report["problems"] if p.startswith("skipped (on_error = \"skip\"): plugin 'bad' (bad-drafter==1.0): ")]
    assert any(p.startswith("skipped") for p in report["problems"])
    run_sglang_plugin_loading()
    assert plugin_algorithms() == report["would_register"]


def test_skip_with_every_plugin_faulty_patches_nothing(case_env, patch_targets):
    case_env(Case("all bad", "", "[plugins]\nenable = ['bad']\non_error = 'skip'\n", {"bad": "draft_hook_raises_for_its_own_algorithm"}))
    run_sglang_plugin_loading()
    assert_untouched(patch_targets)


def test_skip_drops_both_claimants_of_one_name(case_env):
    case_env(Case("collision", "", SKIPPING.replace("'bad'", "'sbd'"), {"sbd": "offers_sbd2"}))
    run_sglang_plugin_loading()
    assert plugin_algorithms() == ["DFLASH_BLOCK"]


def test_narrowing_leaves_tables_of_left_out_plugins_inert(case_env, monkeypatch):
    """The examples' plugins.toml (tests/examples.toml) with SGLANG_SPEC_PLUGINS narrowing, or a disable entry."""
    case_env(Case("narrow", "", (ROOT / "tests" / "examples.toml").read_text()))
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS", "dflash_block")
    run_sglang_plugin_loading()
    assert plugin_algorithms() == ["DFLASH_BLOCK"]
    reset_plugin_state()
    monkeypatch.delenv("SGLANG_SPEC_PLUGINS")
    case_env(Case("disable", "", (ROOT / "tests" / "examples.toml").read_text().replace("disable = []", 'disable = ["sbd"]').replace('enable = ["sbd", "dflash_block"]', "")))
    run_sglang_plugin_loading()
    assert "DFLASH_BLOCK" in plugin_algorithms() and "SBD" not in plugin_algorithms()  # every other installed plugin loads
