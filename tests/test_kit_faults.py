"""The conformance kit on plugins whose faults used to trip the kit itself
(issue 24 item 8), run as a drafter's suite runs it (pytest in a subprocess,
``-p sglang_spec_plugins.testing``): each fault is reported once, by the
check it belongs to, naming the plugin; the checks that depend on what failed
say they did not run instead of failing with "the checks on SGLang could not
run" and a traceback; and the kit's own processes do not take part in a
server's agreement their environment happens to name."""

import re

import pytest

from dists import simple_plugin
from test_kit import install, kit

# slow: the main run (0.5.23) runs it; on the other releases the kit's checks on each release: test_kit and test_examples_start run on every release
pytestmark = [pytest.mark.slow, pytest.mark.sglang]



def results(output):
    """``{"ALGORITHM::check": outcome}`` from pytest's ``-v`` lines."""
    return dict(re.findall(r"^sglang-spec-plugins::\w+::(\S+) (PASSED|FAILED|SKIPPED|ERROR)", output, re.M))


FAULTY = {
    "inst": simple_plugin("INST").replace("worker_factory=lambda server_args: Worker",
                                          "worker_factory=lambda server_args: Worker()"),
    "raises": simple_plugin("RAISES").replace("worker_factory=lambda server_args: Worker",
                                              "worker_factory=lambda server_args: __import__('flash_attn_not_installed')"),
    "zero": simple_plugin("ZERO", width="0"),
    "lowmax": simple_plugin("LOWMAX", max_width="0"),
}


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory):
    """One kit run over every faulty plugin (as a suite checking several plugins runs it): (rc, output, results)."""
    root = tmp_path_factory.mktemp("site")
    for name, source in FAULTY.items():
        install(root, name, source)
    rc, output = kit(root, tmp_path_factory.mktemp("suite"), sorted(FAULTY), select=None, extra=("-v",))
    return rc, output, results(output)


def failed(found, algorithm):
    return [item for item, outcome in found.items() if item.startswith(f"{algorithm}::") and outcome == "FAILED"]


def test_no_check_trips_the_kit(faulty_run):
    rc, output, found = faulty_run
    assert rc == 1 and found, output
    assert "could not run" not in output and "Traceback" not in output, output


def test_a_factory_returning_an_instance_is_one_finding(faulty_run):
    _, output, found = faulty_run
    flat = " ".join(output.split())
    assert re.search(r"plugin 'inst', algorithm INST: the worker factory returned <inst_plugin.Worker object at 0x[0-9a-f]+>, "
                     r"not a class; SGLang \S+ instantiates what it returns", flat), output
    assert failed(found, "INST") == ["INST::sglang_worker"], found


def test_a_factory_that_raises_is_one_finding(faulty_run):
    _, output, found = faulty_run
    assert "create_worker raised ModuleNotFoundError: No module named 'flash_attn_not_installed'" in " ".join(output.split())
    assert failed(found, "RAISES") == ["RAISES::sglang_start"], found
    assert found["RAISES::sglang_worker"] == "SKIPPED", found


@pytest.mark.parametrize("algorithm", ["ZERO", "LOWMAX"])
def test_a_refused_answer_is_not_asked_again_on_sglang(faulty_run, algorithm):
    _, output, found = faulty_run
    assert failed(found, algorithm) == [f"{algorithm}::answers"], found
    assert {found[f"{algorithm}::sglang_{s}"] for s in ("registry", "start", "worker", "attention")} == {"SKIPPED"}, found
    assert f"not run: the plugin's answers are refused ({algorithm}::answers)" in output, output


def test_the_kit_does_not_join_a_server_agreement_named_in_its_environment(site, tmp_path):
    """What the environment's agreement directory holds is the server's affair, not the plugin's."""
    notes = tmp_path / "not-a-directory"
    notes.write_text("notes\n")
    install(site.path, "good", simple_plugin("GOOD", width="1"))
    rc, output = kit(site.path, tmp_path / "suite", ["good"], select="sglang_registry", extra=("-v",),
                     env={"SGLANG_SPEC_PLUGINS_AGREEMENT": str(notes)})
    assert rc == 0 and results(output)["GOOD::sglang_registry"] == "PASSED", output
