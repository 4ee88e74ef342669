"""The conformance kit, run as a drafter's suite runs it (pytest in a
subprocess, ``-p sglang_spec_plugins.testing``), on deliberately broken
plugins installed as real distributions: each fails the kit with a message
naming the plugin, the hook and the arguments. A good plugin passes, and a
suite that does not turn the kit on is not touched by it."""

import os
import subprocess
import sys
import textwrap

import pytest

from dists import PLUGIN_HEADER, make_dist, simple_plugin

CPU_CHECKS = "not sglang_"


def kit(site_path, cwd, plugins, *, select=CPU_CHECKS, extra=(), env=None):
    """Run pytest with the kit on ``plugins`` in an empty project (``select``: its ``-k``, None: every item;
    ``env``: added to the environment); return (rc, output)."""
    cwd.mkdir(exist_ok=True)
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site_path), os.environ.get("PYTHONPATH", "")]))
    for name in ("SGLANG_SPEC_PLUGINS", "SGLANG_SPEC_PLUGINS_CONFIG", "SGLANG_SPEC_PLUGINS_AGREEMENT"):
        environ.pop(name, None)
    environ.update(env or {})
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "sglang_spec_plugins.testing",
           *[arg for name in plugins for arg in ("--sglang-spec-plugin", name)], *(("-k", select) if select else ()),
           "-rfs", *extra]
    out = subprocess.run(cmd, cwd=cwd, env=environ, capture_output=True, text=True, timeout=600)
    return out.returncode, out.stdout + out.stderr


def install(root, name, source):
    make_dist(root, f"broken-{name}", {name: f"{name}_plugin"}, {f"{name}_plugin": source})


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


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory):
    """One kit run over every broken plugin (one pytest process, as a suite
    checking several plugins runs it)."""
    root = tmp_path_factory.mktemp("site")
    for name, (source, _) in BROKEN.items():
        install(root, name, source)
    return kit(root, tmp_path_factory.mktemp("suite"), sorted(BROKEN))


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_plugin_fails_the_kit(broken_run, name):
    rc, output = broken_run
    assert rc == 1, output
    assert f"sglang-spec-plugins conformance, {name}::" in output, output
    assert BROKEN[name][1] in " ".join(output.split()), output


def test_unknown_argument_names_the_argument(broken_run):
    flat = " ".join(broken_run[1].split())
    assert "plugin 'unknownarg' does not load: plugin 'unknownarg'" in flat and "breaks the hook contract" in flat
    assert "num_tokens" in flat


def test_good_plugin_passes_and_sglang_checks_skip_or_run(site, tmp_path):
    install(site.path, "good", simple_plugin("GOOD", width="max(1, num_draft_tokens - 1)", max_width="num_draft_tokens"))
    rc, output = kit(site.path, tmp_path / "suite", ["good"])
    assert rc == 0, output
    assert "4 passed" in output or "5 passed" in output, output  # loads, validate_server_args, answers, pure (+factory)


@pytest.mark.sglang
def test_worker_class_that_does_not_fit(site, tmp_path):
    install(site.path, "badworker", simple_plugin("BADWORKER"))
    rc, output = kit(site.path, tmp_path / "suite", ["badworker"], select="sglang_worker")
    assert rc == 1, output
    flat = " ".join(output.split())
    assert "plugin 'badworker', algorithm BADWORKER: Worker lacks" in flat, output
    assert "Worker defines no forward_batch_generation(self, batch, **kwargs)" in flat, output


def test_kit_needs_a_plugin_name(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "sglang_spec_plugins.testing", "-p", "no:cacheprovider"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "names no plugin" in out.stdout + out.stderr


def test_installing_the_package_does_not_turn_the_kit_on(tmp_path):
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "1 passed" in out.stdout and "sglang-spec-plugins" not in out.stdout, out.stdout


def test_kit_asks_the_ndts_the_author_configures(site, tmp_path):
    """A width rule wrong only at ndt 24: found once the author names 24 (``--sglang-spec-ndt`` or the ini option)."""
    install(site.path, "at24", simple_plugin("AT24", width="0 if num_draft_tokens == 24 else 1"))
    rc, output = kit(site.path, tmp_path / "plain", ["at24"])
    assert rc == 0, output
    rc, output = kit(site.path, tmp_path / "named", ["at24"], extra=("--sglang-spec-ndt", "24"))
    assert rc == 1 and "sgl_spec_verify_width(num_draft_tokens=24, is_draft_worker=False) returned 0" in output, output


def test_a_plugin_that_prints_at_import_passes(site, tmp_path):
    """What a plugin prints while imported is not the kit's protocol (the `pure` check's fresh processes)."""
    install(site.path, "loud", "print('hello from loud_plugin')\n" + simple_plugin("LOUD", width="1"))
    rc, output = kit(site.path, tmp_path / "suite", ["loud"])
    assert rc == 0, output
    assert "JSONDecodeError" not in output, output
