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

pytestmark = pytest.mark.sglang



def results(output):
    """``{"ALGORITHM::check": outcome}`` from pytest's ``-v`` lines."""
    return dict(re.findall(r"^sglang-spec-plugins::\w+::(\S+) (PASSED|FAILED|SKIPPED|ERROR)", output, re.M))


def run_kit(site, tmp_path, name, source, env=None):
    install(site.path, name, source)
    rc, output = kit(site.path, tmp_path / "suite", [name], select=None, extra=("-v",), env=env)
    assert "could not run" not in output and "Traceback" not in output, output
    return rc, output, results(output)


def test_a_factory_returning_an_instance_is_one_finding(site, tmp_path):
    source = simple_plugin("INST").replace("worker_factory=lambda server_args: Worker", "worker_factory=lambda server_args: Worker()")
    rc, output, found = run_kit(site, tmp_path, "inst", source)
    assert rc == 1
    flat = " ".join(output.split())
    assert re.search(r"plugin 'inst', algorithm INST: the worker factory returned <inst_plugin.Worker object at 0x[0-9a-f]+>, "
                     r"not a class; SGLang \S+ instantiates what it returns", flat), output
    assert [item for item, outcome in found.items() if outcome == "FAILED"] == ["INST::sglang_worker"], found


def test_a_factory_that_raises_is_one_finding(site, tmp_path):
    source = simple_plugin("RAISES").replace("worker_factory=lambda server_args: Worker",
                                             "worker_factory=lambda server_args: __import__('flash_attn_not_installed')")
    rc, output, found = run_kit(site, tmp_path, "raises", source)
    assert rc == 1
    assert "create_worker raised ModuleNotFoundError: No module named 'flash_attn_not_installed'" in " ".join(output.split())
    assert [item for item, outcome in found.items() if outcome == "FAILED"] == ["RAISES::sglang_start"], found
    assert found["RAISES::sglang_worker"] == "SKIPPED", found


@pytest.mark.parametrize("hook", ["width", "max_width"])
def test_a_refused_answer_is_not_asked_again_on_sglang(site, tmp_path, hook):
    source = simple_plugin("ZERO", **{hook: "0"})
    rc, output, found = run_kit(site, tmp_path, "zero", source)
    assert rc == 1 and found["ZERO::answers"] == "FAILED", found
    assert {found[f"ZERO::sglang_{s}"] for s in ("registry", "attention")} == {"SKIPPED"}, found
    assert "not run: the plugin's answers are refused (ZERO::answers)" in output, output


def test_the_kit_does_not_join_a_server_agreement_named_in_its_environment(site, tmp_path):
    """What the environment's agreement directory holds is the server's affair, not the plugin's."""
    notes = tmp_path / "not-a-directory"
    notes.write_text("notes\n")
    rc, output, found = run_kit(site, tmp_path, "good", simple_plugin("GOOD", width="1"),
                                env={"SGLANG_SPEC_PLUGINS_AGREEMENT": str(notes)})
    assert rc == 0, output
    assert found["GOOD::sglang_registry"] == "PASSED", found
