"""plugins.toml parsing: every bad case gets its own message naming file, table and key."""

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
