"""The conformance kit, run as a drafter's suite runs it (``-p
sglang_spec_plugins.testing``, in an inner pytest session: the ``kit``
fixture), on deliberately broken plugins installed as real distributions:
each fails the kit with a message naming the plugin, the hook and the
arguments. A good plugin passes, and a suite that does not turn the kit on is
not touched by it."""

import re
import textwrap

import pytest

from dists import PLUGIN_HEADER, simple_plugin
from sglang_spec_plugins.testing.checks import sglang_importable

FACTORY = "skipped" if sglang_importable() else "passed"
"""The CPU check ``worker_factory``: where SGLang is importable its own create_worker calls the factory (sglang_start)."""
SHIFT = int(FACTORY == "passed")
GOOD = {"passed": 4 + SHIFT, "skipped": 1 - SHIFT, "deselected": 4}
"""A good plugin's CPU checks: loads, validate_server_args, answers, pure, worker_factory (the 4 sglang_ deselected)."""


def literal(text):
    """``text`` as an fnmatch pattern matching itself."""
    return re.sub(r"([*?\[])", r"[\1]", text)


BROKEN = {
    "zero": (simple_plugin("ZERO", width="0"),
             "plugin 'zero' (broken-zero==1.0): algorithm ZERO: sgl_spec_verify_width(num_draft_tokens=1, "
             "is_draft_worker=False) returned 0; it must be an int from 1 to the maximum width 1"),
    "flaky": ("import itertools\n_calls = itertools.count()\n"
              + simple_plugin("FLAKY", width="num_draft_tokens - next(_calls) % 2"),
              "algorithm FLAKY: sgl_spec_verify_width(num_draft_tokens=1, is_draft_worker=False) answered 1, then 0 "
              "for the same arguments; answers must be pure"),
    "unknownarg": (simple_plugin("UNKNOWNARG") + "\n@hookimpl\ndef sgl_spec_verify_width(algorithm, num_tokens):\n"
                                                 "    return None\n",
                   "plugin 'unknownarg' does not load"),
    "raises": (simple_plugin("RAISES", width="1 // 0"),
               "algorithm RAISES: sgl_spec_verify_width(num_draft_tokens=1, is_draft_worker=False) raised "
               "ZeroDivisionError"),
    "wrongcase": (PLUGIN_HEADER + textwrap.dedent("""
        class Worker:
            pass

        @hookimpl
        def sgl_spec_algorithms():
            return [AlgorithmSpec(name="wrongcase", worker_factory=lambda server_args: Worker)]

        @hookimpl
        def sgl_spec_verify_width(algorithm, num_draft_tokens):
            if algorithm != "wrongcase":
                return None
            return 1
        """),
                  "sgl_spec_verify_width(num_draft_tokens=1, is_draft_worker=False) returned None for its own "
                  "algorithm WRONGCASE; hooks receive the name upper case"),
    "lowmax": (simple_plugin("LOWMAX", max_width="num_draft_tokens - 1"),
               "algorithm LOWMAX: sgl_spec_max_verify_width(num_draft_tokens=1) returned 0; the maximum width must be "
               "an int >= num_draft_tokens=1"),
    "validator32": (simple_plugin("VALIDATOR32").replace(
        "worker_factory=lambda server_args: Worker)", "worker_factory=lambda server_args: Worker, validate_server_args=_validate)")
        + "\ndef _validate(args):\n    assert args.speculative_num_draft_tokens < 32, 'blocks of at most 16'\n",
                    "plugin 'validator32', algorithm VALIDATOR32: validate_server_args(server_args with "
                    "speculative_num_draft_tokens=32) raised AssertionError: blocks of at most 16; SGLang expects None or a "
                    "ValueError"),
    "perprocess": ("import random\n_SEED = random.SystemRandom().randrange(1 << 30)\n"
                   + simple_plugin("PERPROCESS", width="1 + _SEED % num_draft_tokens"),
                   "differ between this process and a fresh one"),
}


def test_broken_plugins_fail_the_kit(kit):
    """One kit run over every broken plugin (one session, as a suite checking several plugins runs it): each
    fails with its message under its own heading."""
    for name, (source, _) in BROKEN.items():
        kit.install(name, source)
    result = kit.run(*sorted(BROKEN))
    # the 7 that load: loads, validate_server_args, answers, pure, worker_factory (4 sglang_ checks deselected);
    # one failure each but validator32's (validate_server_args and answers, and worker_factory where it runs:
    # it needs the accepted ndts); the checks after a refused answer skip
    result.assert_outcomes(failed=9 + SHIFT, passed=14 + 6 * SHIFT, skipped=13 - 7 * SHIFT, deselected=28)
    for name, (_, message) in sorted(BROKEN.items()):
        result.stdout.fnmatch_lines([f"sglang-spec-plugins conformance, {name}::*:", f"*{literal(message)}*"],
                                    consecutive=True)


def test_unknown_argument_names_the_argument(kit):
    kit.install("unknownarg", BROKEN["unknownarg"][0])
    result = kit.run("unknownarg")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*plugin 'unknownarg' does not load: plugin 'unknownarg'*breaks the hook contract*num_tokens*"])


def test_good_plugin_passes_and_sglang_checks_skip_or_run(kit):
    kit.install("good", simple_plugin("GOOD", width="max(1, num_draft_tokens - 1)", max_width="num_draft_tokens"))
    kit.run("good").assert_outcomes(**GOOD)


@pytest.mark.sglang
def test_worker_class_that_does_not_fit(kit):
    kit.install("badworker", simple_plugin("BADWORKER"))
    result = kit.run("badworker", select="sglang_worker")
    result.assert_outcomes(failed=1, deselected=8)
    result.stdout.fnmatch_lines(["sglang-spec-plugins conformance, badworker::BADWORKER::sglang_worker:",
                                 "plugin 'badworker', algorithm BADWORKER: Worker lacks*",
                                 f"*{literal('Worker defines no forward_batch_generation(self, batch, **kwargs)')}*"])


@pytest.mark.slow  # the main run (0.5.23) runs it: which session a report belongs to is the kit's, not the release's
@pytest.mark.sglang
def test_each_session_runs_the_checks_on_sglang_again(kit):
    """Two kit sessions in one process (as pytester runs them): the second checks the plugin as it is then,
    not the first one's report."""
    kit.install("edited", simple_plugin("EDITED"))
    first = kit.run("edited", select="sglang_worker")
    first.assert_outcomes(failed=1, deselected=8)
    first.stdout.fnmatch_lines([f"*{literal('Worker defines no forward_batch_generation(self, batch, **kwargs)')}*"])
    (kit.site / "edited_plugin.py").write_text(simple_plugin("EDITED").replace(
        "class Worker:\n    pass", "class Worker:\n    def forward_batch_generation(self, batch, **kwargs):\n        return None"))
    second = kit.run("edited", select="sglang_worker")
    second.assert_outcomes(failed=1, deselected=8)
    second.stdout.fnmatch_lines(["plugin 'edited', algorithm EDITED: Worker lacks*"])
    second.stdout.no_fnmatch_line("*Worker defines no forward_batch_generation*")


def test_kit_needs_a_plugin_name(pytester):
    result = pytester.runpytest("-p", "sglang_spec_plugins.testing", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*sglang_spec_plugins.testing is enabled but names no plugin*"])


def test_installing_the_package_does_not_turn_the_kit_on(pytester):
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*sglang-spec-plugins*")


def test_kit_asks_the_ndts_the_author_configures(kit):
    """A width rule wrong only at ndt 24: found once the author names 24 (``--sglang-spec-ndt`` or the ini option)."""
    kit.install("at24", simple_plugin("AT24", width="0 if num_draft_tokens == 24 else 1"))
    kit.run("at24").assert_outcomes(**GOOD)
    result = kit.run("at24", extra=("--sglang-spec-ndt", "24"))
    result.assert_outcomes(failed=1, passed=2 + SHIFT, skipped=2 - SHIFT, deselected=4)  # answers; pure skips
    result.stdout.fnmatch_lines(["*sgl_spec_verify_width(num_draft_tokens=24, is_draft_worker=False) returned 0*"])


def test_a_plugin_that_prints_at_import_passes(kit):
    """What a plugin prints while imported is not the kit's protocol (the `pure` check's fresh processes)."""
    kit.install("loud", "print('hello from loud_plugin')\n" + simple_plugin("LOUD", width="1"))
    result = kit.run("loud")
    result.assert_outcomes(**GOOD)
    assert "JSONDecodeError" not in result.stdout.str() + result.stderr.str(), result.stdout.str()
