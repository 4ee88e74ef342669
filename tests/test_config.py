"""plugins.toml parsing: every bad case gets its own message naming file, table and key."""

import logging
import os
import subprocess
import sys

import pytest

from sglang_spec_plugins import config
from sglang_spec_plugins.errors import ConfigError


def problems_of(write_toml, text):
    path = write_toml(text)
    with pytest.raises(ConfigError) as info:
        config.load(path)
    return path, info.value.problems


def test_full_file_parses_into_immutable_config(write_toml):
    path = write_toml(
        """
        [plugins]
        enable = ["sbd"]
        disable = ["other"]
        on_error = "skip"

        [algorithms.sbd]
        plugin = "sbd"
        max_tokens_per_req = 16
        verify_width = 8
        nested = { a = [1, 2] }
        """
    )
    cfg = config.load(path)
    assert cfg.source == path and cfg.enable == ("sbd",) and cfg.disable == ("other",)
    assert cfg.on_error == "skip"
    sbd = cfg.algorithm("Sbd")
    assert (sbd.name, sbd.plugin, sbd.max_tokens_per_req, sbd.enabled) == ("SBD", "sbd", 16, True)
    assert dict(sbd.settings) == {"verify_width": 8, "nested": sbd.settings["nested"]}
    assert sbd.settings["nested"]["a"] == (1, 2)
    with pytest.raises(TypeError):
        sbd.settings["verify_width"] = 9
    with pytest.raises(TypeError):
        sbd.settings["nested"]["a"] = 3
    with pytest.raises(AttributeError):
        cfg.on_error = "fail"


def test_defaults_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(config.CONFIG_ENV, raising=False)
    cfg = config.load()
    assert cfg.source is None and cfg.enable is None and cfg.on_error == "fail"
    assert cfg.origin == "(built-in defaults)"


def test_located_through_env_then_cwd(tmp_path, monkeypatch, write_toml):
    monkeypatch.chdir(tmp_path)
    local = write_toml("[plugins]\non_error = 'skip'\n")
    monkeypatch.delenv(config.CONFIG_ENV, raising=False)
    assert config.locate() == local
    other = write_toml("[plugins]\n", name="other.toml")
    monkeypatch.setenv(config.CONFIG_ENV, str(other))
    assert config.locate() == other


def test_env_naming_a_missing_file(monkeypatch, tmp_path):
    monkeypatch.setenv(config.CONFIG_ENV, str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match=r"SGLANG_SPEC_PLUGINS_CONFIG=.*nope.toml: no such file"):
        config.load()


def test_invalid_toml_names_file_and_position(write_toml):
    path, problems = problems_of(write_toml, "[plugins\n")
    assert problems[0].startswith(f"{path}: not valid TOML")
    assert "line 1" in problems[0]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[plugin]\n", "unknown top-level key 'plugin'"),
        ("plugins = 3\n", "[plugins] must be a table"),
        ("[plugins]\nenabled = ['a']\n", "[plugins] unknown key 'enabled' (known: enable, disable, on_error)"),
        ("[plugins]\nenable = 'sbd'\n", "[plugins] enable must be a list of plugin names (strings), got 'sbd'"),
        ("[plugins]\nenable = [1]\n", "[plugins] enable must be a list of plugin names (strings), got [1]"),
        ("[plugins]\ndisable = [true]\n", "[plugins] disable must be a list of plugin names (strings), got [True]"),
        ("[plugins]\non_error = 'ignore'\n", "[plugins] on_error must be one of 'fail', 'skip', got 'ignore'"),
        ("[plugins]\nenable = ['a']\ndisable = ['a']\n", "[plugins] plugin 'a' is in both enable and disable"),
        ("algorithms = 1\n", "[algorithms] must be a table of [algorithms.NAME] tables"),
        ("[algorithms]\nSBD = 1\n", "[algorithms.SBD] must be a table"),
        ("[algorithms.eagle]\n", "[algorithms.eagle] 'EAGLE' is a built-in SGLang algorithm name"),
        ("[algorithms.NEXTN]\n", "[algorithms.NEXTN] 'NEXTN' is a built-in SGLang algorithm name"),
        ("[algorithms.SBD]\nplugin = 3\n", "[algorithms.SBD] plugin must be a plugin name (string), got 3"),
        ("[algorithms.SBD]\nenabled = 'yes'\n", "[algorithms.SBD] enabled must be true or false, got 'yes'"),
        ("[algorithms.SBD]\nmax_tokens_per_req = 0\n", "[algorithms.SBD] max_tokens_per_req must be a positive integer, got 0"),
        ("[algorithms.SBD]\nmax_tokens_per_req = true\n", "[algorithms.SBD] max_tokens_per_req must be a positive integer, got True"),
        ("[algorithms.SBD]\nmax_tokens_per_req = 2.5\n", "[algorithms.SBD] max_tokens_per_req must be a positive integer, got 2.5"),
        ("[algorithms.SBD]\n[algorithms.sbd]\n", "[algorithms.sbd] names the same algorithm as another table"),
    ],
)
def test_each_bad_case_names_file_table_and_key(write_toml, text, expected):
    path, problems = problems_of(write_toml, text)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}: ")
    assert expected in problems[0]


def test_every_problem_is_reported_at_once(write_toml):
    _, problems = problems_of(
        write_toml,
        "[plugins]\non_error = 'x'\nbogus = 1\n[algorithms.DFLASH]\n[algorithms.SBD]\nenabled = 1\n",
    )
    assert len(problems) == 4



def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "plugins.toml"
    path.write_bytes(b"\xef\xbb\xbf[plugins]\non_error = 'skip'\n")
    assert config.load(path).on_error == "skip"


def test_every_problem_of_a_file_comes_with_the_valid_rest(tmp_path):
    path = tmp_path / "plugins.toml"
    path.write_text("[plugins]\non_error = 'x'\nenable = ['a']\n[algorithms.A]\nmax_tokens_per_req = 0\n[algorithms.B]\nk = 1\n")
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert len(info.value.problems) == 2
    partial = info.value.partial
    assert (partial.enable, partial.on_error, list(partial.algorithms)) == (("a",), "fail", ["B"])


# --- nobody else's files (issue 45): the file others can write, the file read, the names shown, the nesting ---

OTHER_UID = 12345
"""A user this process is not (nor root): the tests run as root, which may chown a file to it."""


as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chowning a file to another user or group needs root")


@pytest.mark.parametrize("mode, owner, why", [
    (0o646, None, "writable by others (mode 0646)"),
    pytest.param(0o664, (-1, OTHER_UID), f"writable by group {OTHER_UID} (mode 0664)", marks=as_root),
    pytest.param(0o666, (-1, OTHER_UID), f"writable by group {OTHER_UID} and others (mode 0666)", marks=as_root),
    pytest.param(0o644, (OTHER_UID, OTHER_UID), f"owned by uid {OTHER_UID}", marks=as_root),
])
def test_a_plugins_toml_others_can_write_is_refused(write_toml, monkeypatch, mode, owner, why):
    monkeypatch.delenv(config.PERMISSIONS_ENV, raising=False)
    path = write_toml("[plugins]\non_error = 'skip'\n")
    if owner:
        os.chown(path, *owner)
    os.chmod(path, mode)
    with pytest.raises(ConfigError) as info:
        config.load(path)
    (problem,) = info.value.problems
    assert problem.startswith(f"{path}: ") and why in problem and f"{config.PERMISSIONS_ENV}=warn" in problem, problem


def test_a_plugins_toml_writable_by_its_owner_s_private_group_is_read(write_toml, monkeypatch):
    """A umask of 002 makes files group-writable by each user's private group (the owner's primary group,
    with no other member): nobody else can write them."""
    import grp
    import pwd

    info = os.stat(write_toml(""))
    owner = pwd.getpwuid(info.st_uid)
    if info.st_gid != owner.pw_gid or set(grp.getgrgid(info.st_gid).gr_mem) - {owner.pw_name}:
        pytest.skip("this user's files are not in a group of their own")
    monkeypatch.delenv(config.PERMISSIONS_ENV, raising=False)
    path = write_toml("[plugins]\non_error = 'skip'\n")
    os.chmod(path, 0o664)
    assert config.load(path).on_error == "skip"


def test_a_plugins_toml_others_can_write_is_read_with_a_warning_where_the_operator_says_so(write_toml, monkeypatch, caplog):
    monkeypatch.setenv(config.PERMISSIONS_ENV, "warn")
    path = write_toml("[plugins]\non_error = 'skip'\n")
    os.chmod(path, 0o646)
    with caplog.at_level(logging.WARNING, logger="sglang_spec_plugins"):
        assert config.load(path).on_error == "skip"
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(path) in warning and "writable by others (mode 0646)" in warning, warning


def test_an_unknown_permissions_setting_is_refused(write_toml, monkeypatch):
    monkeypatch.setenv(config.PERMISSIONS_ENV, "lenient")
    with pytest.raises(ConfigError, match=rf"{config.PERMISSIONS_ENV}='lenient': expected 'refuse' or 'warn'"):
        config.load(write_toml("[plugins]\n"))


def test_a_plugins_toml_through_a_symlink_is_named_as_the_file_read(tmp_path, monkeypatch):
    real = tmp_path / "conf" / "real.toml"
    real.parent.mkdir()
    real.write_text("[plugins]\non_error = 'x'\n")
    link = tmp_path / "plugins.toml"
    link.symlink_to(real)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(config.CONFIG_ENV, raising=False)
    with pytest.raises(ConfigError) as info:
        config.load()
    (problem,) = info.value.problems
    assert problem.startswith(f"{link} (-> {real}): [plugins] on_error"), problem


def test_names_from_the_file_reach_no_message_raw(write_toml):
    """A table name or key holding a newline and an ANSI escape cannot forge a line of the log."""
    _, problems = problems_of(write_toml, '[algorithms."X\\nsglang-spec-plugins: all fine\\u001b[2J"]\n'
                                          '[plugins]\n"enable\\u001b[31m" = 1\nenable = ["a\\nb"]\ndisable = ["a\\nb"]\n')
    assert len(problems) == 3, problems
    assert all(ch.isprintable() for problem in problems for ch in problem), problems
    assert any("[algorithms.X\\nsglang-spec-plugins: all fine\\x1b[2J]" in p for p in problems), problems


def test_a_file_whose_own_path_holds_a_newline_is_named_escaped(tmp_path):
    path = tmp_path / "odd\nname.toml"
    path.write_text("[plugins]\non_error = 'x'\n")
    with pytest.raises(ConfigError) as info:
        config.load(path)
    (problem,) = info.value.problems
    assert problem.startswith(str(path).replace("\n", "\\n") + ": "), problem


NESTED = {
    "dotted key": "a." * 100_000 + "a = 1\n",
    "table header": "[" + "a." * 100_000 + "a]\n",
    "dotted key in an inline table": "x = {" + "a." * 100_000 + "a = 1}\n",
    "inline tables": "x = " + "{a = " * 100_000 + "1" + "}" * 100_000 + "\n",
    "arrays": "x = " + "[" * 100_000 + "1" + "]" * 100_000 + "\n",
}

NESTED_SCRIPT = """
import resource, sys, time
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))  # quadratic memory fails here, not the machine
from sglang_spec_plugins import config
from sglang_spec_plugins.errors import ConfigError
started = time.perf_counter()
try:
    config.load(Path(sys.argv[1]))
except ConfigError as exc:
    seconds = round(time.perf_counter() - started, 3)
    peak = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:"))  # kB, this exec's
    print(seconds, int(peak) // 1024)
    print(exc)
"""


@pytest.mark.parametrize("kind", sorted(NESTED))
def test_nesting_100_000_deep_is_refused_in_linear_time_and_memory(tmp_path, kind):
    """2 s and 200 MB are 10x what a linear refusal takes here, on a busy 2-core machine; the parser takes
    ~12 s for the table header and ~40 GB for the dotted key at this depth. The peak is the child's own
    (``VmHWM``: ``ru_maxrss`` keeps the forking parent's, a pytest process that may hold SGLang and torch)."""
    path = tmp_path / "plugins.toml"
    path.write_text(NESTED[kind])
    out = subprocess.run([sys.executable, "-c", NESTED_SCRIPT, str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout, out.stderr[-2000:]
    seconds, megabytes = out.stdout.splitlines()[0].split()
    assert out.stdout.splitlines()[1] == f"{path}: arrays or tables nested more than {config.MAX_NESTING} levels deep"
    assert float(seconds) < 2.0 and int(megabytes) < 200, out.stdout
