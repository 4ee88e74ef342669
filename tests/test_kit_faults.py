"""The conformance kit on plugins whose faults used to trip the kit itself
(issue 24 item 8), run as a drafter's suite runs it (``-p
sglang_spec_plugins.testing``, in an inner pytest session: the ``kit``
fixture): each fault is reported once, by the check it belongs to, naming the
plugin; the checks that depend on what failed say they did not run instead of
failing with "the checks on SGLang could not run" and a traceback; and the
kit's own processes do not take part in a server's agreement their
environment happens to name."""

import re

import pytest

from dists import simple_plugin

# slow: the main run (0.5.23) runs it; on the other releases the kit's checks on each release: test_kit and test_examples_start run on every release
pytestmark = [pytest.mark.slow, pytest.mark.sglang]


def results(result):
    """``{"ALGORITHM::check": outcome}`` from the ``-v`` lines of the kit's RunResult."""
    return dict(re.findall(r"^sglang-spec-plugins::\w+::(\S+) (PASSED|FAILED|SKIPPED|ERROR)", result.stdout.str(), re.M))


FAULTY = {
    "inst": simple_plugin("INST").replace("worker_factory=lambda server_args: Worker",
                                          "worker_factory=lambda server_args: Worker()"),
    "raises": simple_plugin("RAISES").replace("worker_factory=lambda server_args: Worker",
                                              "worker_factory=lambda server_args: __import__('flash_attn_not_installed')"),
    "zero": simple_plugin("ZERO", width="0"),
    "lowmax": simple_plugin("LOWMAX", max_width="0"),
}


def failed(found, algorithm):
    return [item for item, outcome in found.items() if item.startswith(f"{algorithm}::") and outcome == "FAILED"]


def test_each_fault_is_one_finding_and_no_check_trips_the_kit(kit):
    """One kit run over every faulty plugin (one session, as a suite checking several plugins runs it)."""
    for name, source in FAULTY.items():
        kit.install(name, source)
    result = kit.run(*sorted(FAULTY), select=None, extra=("-v",))
    found = results(result)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED and found, output
    assert "could not run" not in output and "Traceback" not in output, output
    # 9 checks each (loads, validate_server_args, answers, pure, worker_factory, 4 sglang_), one failure each;
    # passed and skipped: INST + RAISES (+ its sglang_worker skipped) + ZERO + LOWMAX (the 6 after answers skipped)
    result.assert_outcomes(failed=4, passed=7 + 6 + 2 + 2, skipped=1 + 2 + 6 + 6)

    # a factory returning an instance
    flat = " ".join(output.split())
    assert re.search(r"plugin 'inst', algorithm INST: the worker factory returned <inst_plugin.Worker object at 0x[0-9a-f]+>, "
                     r"not a class; SGLang \S+ instantiates what it returns", flat), output
    assert failed(found, "INST") == ["INST::sglang_worker"], found

    # a factory that raises
    assert "create_worker raised ModuleNotFoundError: No module named 'flash_attn_not_installed'" in flat, output
    assert failed(found, "RAISES") == ["RAISES::sglang_start"], found
    assert found["RAISES::sglang_worker"] == "SKIPPED", found

    # a refused answer is not asked again on SGLang
    for algorithm in ("ZERO", "LOWMAX"):
        assert failed(found, algorithm) == [f"{algorithm}::answers"], found
        assert {found[f"{algorithm}::sglang_{s}"] for s in ("registry", "start", "worker", "attention")} == {"SKIPPED"}, found
        assert f"not run: the plugin's answers are refused ({algorithm}::answers)" in output, output


def test_the_kit_does_not_join_a_server_agreement_named_in_its_environment(kit, tmp_path, monkeypatch):
    """What the environment's agreement directory holds is the server's affair, not the plugin's."""
    notes = tmp_path / "not-a-directory"
    notes.write_text("notes\n")
    kit.install("good", simple_plugin("GOOD", width="1"))
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS_AGREEMENT", str(notes))
    result = kit.run("good", select="sglang_registry", extra=("-v",))
    result.assert_outcomes(passed=1, deselected=8)
    assert results(result) == {"GOOD::sglang_registry": "PASSED"}, result.stdout.str()
