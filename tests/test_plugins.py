"""Discovery through real entry points: selection, contract validation, ownership."""

import json
import re

import pytest

from dists import PLUGIN_HEADER, simple_plugin
from sglang_spec_plugins import config
from sglang_spec_plugins.errors import ConfigError, PluginError
from sglang_spec_plugins.plugins import discover


def cfg(write_toml, text):
    return config.load(write_toml(text))


@pytest.fixture
def two(site):
    site.add("alpha-drafter", {"alpha": "alpha_mod"}, {"alpha_mod": simple_plugin("ALPHA", width="4")}, version="2.1")
    site.add("beta-drafter", {"beta": "beta_mod"}, {"beta_mod": simple_plugin("BETA", width="2")})
    return site


def test_discovers_entry_points_with_distribution_and_version(two, write_toml):
    ps = discover(cfg(write_toml, "[plugins]\nenable = ['alpha', 'beta']\n"))
    alpha = ps.info("alpha")
    assert (alpha.distribution, alpha.version) == ("alpha-drafter", "2.1")
    assert alpha.module_file.endswith("alpha_mod.py")
    assert set(ps.algorithms) == {"ALPHA", "BETA"}
    assert ps.algorithms["ALPHA"].plugin == "alpha"
    assert [i.plugin_name for i in ps.pm.hook.sgl_spec_verify_width.get_hookimpls()] == ["alpha", "beta"]


def test_enable_disable_and_env_allow_list(two, write_toml, monkeypatch):
    assert [p.name for p in discover(cfg(write_toml, "[plugins]\nenable = ['beta']\n")).plugins] == ["beta"]
    only_alpha = cfg(write_toml, "[plugins]\nenable = ['alpha', 'beta']\ndisable = []\n")
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS", "alpha")
    assert [p.name for p in discover(only_alpha).plugins] == ["alpha"]
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS", " beta , ")
    assert list(discover(only_alpha).algorithms) == ["BETA"]
    monkeypatch.delenv("SGLANG_SPEC_PLUGINS")
    names = [p.name for p in discover(cfg(write_toml, "[plugins]\ndisable = ['beta']\n")).plugins]
    assert "alpha" in names and "beta" not in names


def test_unknown_plugin_names(two, write_toml, monkeypatch):
    with pytest.raises(ConfigError, match=r"plugins.toml: \[plugins\] enable: unknown plugin 'gamma' \(no installed plugin is named alike; \d+ installed\)"):
        discover(cfg(write_toml, "[plugins]\nenable = ['gamma']\n"))
    with pytest.raises(ConfigError, match=r"plugins.toml: \[plugins\] enable: unknown plugin 'alpah' \(did you mean 'alpha'\? \d+ installed\)"):
        discover(cfg(write_toml, "[plugins]\nenable = ['alpah']\n"))
    with pytest.raises(ConfigError, match=r"\[plugins\] disable: unknown plugin 'gamma'"):
        discover(cfg(write_toml, "[plugins]\ndisable = ['gamma']\n"))
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS", "alpha,gamma")
    with pytest.raises(ConfigError, match=r"SGLANG_SPEC_PLUGINS=alpha,gamma: unknown plugin 'gamma'"):
        discover(cfg(write_toml, "[plugins]\nenable = ['alpha']\n"))


def test_unknown_algorithm_and_wrong_owner(two, write_toml):
    two.add("omega-drafter", {"omega": "omega_mod"}, {"omega_mod": simple_plugin("OMEGA")})  # installed, not enabled below
    base = "[plugins]\nenable = ['alpha', 'beta']\n"
    with pytest.raises(ConfigError, match=r"plugins.toml: \[algorithms.GAMMA\]: unknown algorithm; no installed plugin offers it"):
        discover(cfg(write_toml, "[algorithms.gamma]\n"))  # every installed plugin loaded: nobody offers it
    with pytest.raises(ConfigError, match=r"\[algorithms.GAMMA\]: unknown algorithm; no installed plugin offers it; nor does the source of the \d+ installed plugin\(s\) not loaded name it"):
        discover(cfg(write_toml, base + "[algorithms.gamma]\n"))  # the plugins left out do not offer it either
    with pytest.raises(ConfigError, match=r"\[algorithms.ALPAH\]: unknown algorithm; no installed plugin offers it \(did you mean ALPHA, offered by 'alpha'\?\)"):
        discover(cfg(write_toml, base + "[algorithms.alpah]\n"))
    __import__("sys").modules.pop("beta_mod", None)
    narrowed = discover(cfg(write_toml, "[plugins]\nenable = ['alpha']\n[algorithms.beta]\n"))  # offered by a plugin left out
    assert narrowed.notes == (f"{write_toml('x').parent / 'plugins.toml'}: [algorithms.BETA] is inert: no loaded plugin offers it; the source of 'beta' (installed, not loaded) names it",)
    assert "beta_mod" not in __import__("sys").modules  # read, not imported
    with pytest.raises(ConfigError, match=r"\[algorithms.ALPHA\] plugin: plugin 'beta' does not offer ALPHA \(offered by: alpha\)"):
        discover(cfg(write_toml, base + "[algorithms.ALPHA]\nplugin = 'beta'\n"))
    with pytest.raises(ConfigError, match=r"\[algorithms.ALPHA\] plugin: unknown plugin 'zeta'"):
        discover(cfg(write_toml, base + "[algorithms.ALPHA]\nplugin = 'zeta'\n"))
    left_out = discover(cfg(write_toml, "[plugins]\nenable = ['beta']\n[algorithms.ALPHA]\nplugin = 'alpha'\n"))
    assert list(left_out.algorithms) == ["BETA"]
    assert left_out.notes[0].endswith("[algorithms.ALPHA] is inert: its plugin 'alpha' is not loaded")


def test_algorithm_offered_by_two_plugins(site, write_toml):
    site.add("one", {"one": "one_mod"}, {"one_mod": simple_plugin("SAME")})
    site.add("two", {"two": "two_mod"}, {"two_mod": simple_plugin("same")})
    base = "[plugins]\nenable = ['one', 'two']\n"
    with pytest.raises(ConfigError, match=r"\[algorithms.SAME\] plugin: algorithm SAME is offered by several plugins \(one, two\); set plugin"):
        discover(cfg(write_toml, base))
    chosen = discover(cfg(write_toml, base + "[algorithms.SAME]\nplugin = 'two'\n"))
    assert chosen.algorithms["SAME"].plugin == "two"


def test_disabled_algorithm_is_not_offered(two, write_toml):
    ps = discover(cfg(write_toml, "[plugins]\nenable = ['alpha', 'beta']\n[algorithms.BETA]\nenabled = false\n"))
    assert list(ps.algorithms) == ["ALPHA"]


BROKEN = {
    "import": ("raise RuntimeError('no CUDA here')\n", r"plugin 'bad' \(bad-drafter==1.0\): cannot import bad_mod: RuntimeError: no CUDA here"),
    "unknown hook": (PLUGIN_HEADER + "@hookimpl\ndef sgl_spec_verify_widht(algorithm):\n    return 1\n",
                     r"plugin 'bad' \(bad-drafter==1.0\): breaks the hook contract: .*unknown hook 'sgl_spec_verify_widht'"),
    "wrong argument": (PLUGIN_HEADER + "@hookimpl\ndef sgl_spec_verify_width(algo):\n    return 1\n",
                       r"plugin 'bad' \(bad-drafter==1.0\): breaks the hook contract: .*sgl_spec_verify_width.*algo"),
    "not a list": (PLUGIN_HEADER + "@hookimpl\ndef sgl_spec_algorithms():\n    return 'X'\n",
                   r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_algorithms must return a list of AlgorithmSpec, got 'X'"),
    "reserved": (PLUGIN_HEADER + "@hookimpl\ndef sgl_spec_algorithms():\n    return [AlgorithmSpec('eagle3', lambda a: object)]\n",
                 r"plugin 'bad' \(bad-drafter==1.0\): algorithm name 'EAGLE3' is reserved by SGLang"),
    "bad name": (PLUGIN_HEADER + "@hookimpl\ndef sgl_spec_algorithms():\n    return [AlgorithmSpec('my-algo', lambda a: object)]\n",
                 r"plugin 'bad' \(bad-drafter==1.0\): algorithm name 'my-algo' is not a valid name"),
    "twice": (PLUGIN_HEADER + "@hookimpl\ndef sgl_spec_algorithms():\n    return [AlgorithmSpec('X', lambda a: object), AlgorithmSpec('x', lambda a: object)]\n",
              r"plugin 'bad' \(bad-drafter==1.0\): offers algorithm 'X' twice"),
    "factory": (PLUGIN_HEADER + "@hookimpl\ndef sgl_spec_algorithms():\n    return [AlgorithmSpec('X', None)]\n",
                r"plugin 'bad' \(bad-drafter==1.0\): algorithm X: worker_factory is not callable"),
    "raises": (PLUGIN_HEADER + "@hookimpl\ndef sgl_spec_algorithms():\n    raise KeyError('cfg')\n",
               r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_algorithms raised KeyError"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_plugin_fails_by_default_naming_it(two, write_toml, case):
    source, message = BROKEN[case]
    two.add("bad-drafter", {"bad": "bad_mod"}, {"bad_mod": source})
    with pytest.raises(PluginError, match=message) as info:
        discover(cfg(write_toml, "[plugins]\nenable = ['alpha', 'bad']\n"))
    assert info.value.plugin == "bad"


def test_broken_plugin_is_skipped_on_request(two, write_toml):
    two.add("bad-drafter", {"bad": "bad_mod"}, {"bad_mod": BROKEN["wrong argument"][0]})
    ps = discover(cfg(write_toml, "[plugins]\nenable = ['alpha', 'bad']\non_error = 'skip'\n[algorithms.BAD]\nplugin = 'bad'\n"))
    assert [p.name for p in ps.plugins] == ["alpha"]
    assert [f.plugin for f in ps.failures] == ["bad"]
    assert ps.pm.get_plugin("bad") is None
    assert list(ps.algorithms) == ["ALPHA"]


def test_answers_are_traced_to_their_plugin(two, write_toml):
    ps = discover(cfg(write_toml, "[plugins]\nenable = ['alpha', 'beta']\n"))
    got = ps.answers("sgl_spec_verify_width", algorithm="ALPHA", num_draft_tokens=8, is_draft_worker=False, settings={})
    assert got == {"alpha": 4, "beta": None}


def test_a_hook_under_its_old_name_is_refused_with_the_new_one(site, write_toml):
    old = simple_plugin("OLD") + ("\n@hookimpl\ndef sgl_spec_verify_widths(algorithm):\n"
                                  "    return {1: 4} if algorithm == 'OLD' else None\n")
    site.add("old-drafter", {"old": "old_mod"}, {"old_mod": old})
    with pytest.raises(PluginError, match=r"plugin 'old' \(old-drafter==1.0\): implements sgl_spec_verify_widths, "
                                          r"which is now sgl_spec_widths_by_batch_size \(same arguments and answers\)"):
        discover(cfg(write_toml, "[plugins]\nenable = ['old']\n"))


def test_names_a_plugin_brings_reach_no_message_or_log_line_raw(site, write_toml, monkeypatch, caplog):
    """A plugin's name, its distribution's name and version and the text of what it raises cannot forge a log
    line: every control character (a newline, an ANSI escape) is shown escaped, in every message and log line."""
    import logging

    from sglang_spec_plugins import loader

    evil = "evil\x1b[31m"
    site.add("evil-drafter\x1b[2J", {evil: "evil_mod"}, {"evil_mod": simple_plugin("EVIL", width="2")}, version="1.0\x1b[0m")
    site.add("raising-drafter", {"raising": "raising_mod"},
             {"raising_mod": "raise RuntimeError('boom\\nsglang-spec-plugins: all fine\\x1b[2J')\n"})
    toml = write_toml(f'[plugins]\nenable = ["{evil}", "raising"]\non_error = "skip"\n'
                      '[algorithms.EVIL]\nenabled = false\n'.replace("\x1b", "\\u001b"))
    environ = {"SGLANG_SPEC_PLUGINS_CONFIG": str(toml), "SGLANG_SPEC_PLUGINS_CACHE": "off"}
    loader._reset_for_tests()
    try:
        with caplog.at_level(logging.DEBUG, logger="sglang_spec_plugins"):
            report = loader.load(environ)
    finally:
        loader._reset_for_tests()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("sglang_spec_plugins")]
    assert [p.name for p in report.plugins.plugins] == [evil] and [f.plugin for f in report.plugins.failures] == ["raising"]
    assert any("evil\\x1b[31m (evil-drafter\\x1b[2J==1.0\\x1b[0m)" in line for line in lines), lines
    assert any("boom\\nsglang-spec-plugins: all fine\\x1b[2J" in line for line in lines), lines
    assert all(ch.isprintable() for line in lines for ch in line), [line for line in lines if not line.isprintable()]
    error = PluginError(evil, "x", "evil-drafter\x1b[2J==1.0")
    assert str(error).isprintable(), str(error)


@pytest.mark.parametrize("group", ["sglang.srt.plugins", "sglang_spec_plugin"])
def test_a_plugin_registered_in_another_entry_point_group_is_named_with_its_group(site, write_toml, monkeypatch, group):
    """A drafter whose entry point sits in SGLang's own plugin group, or a misspelt one, is not "unknown": the
    message names its distribution, the group it is in and the group it belongs in."""
    site.add("lost-drafter", {"lost": "lost_mod"}, {"lost_mod": simple_plugin("LOST")}, group=group)
    said = (rf"plugin 'lost' is not an entry point of the group 'sglang_spec_plugins': lost-drafter==1.0 registers it "
            rf"in the group '{re.escape(group)}' \(lost = lost_mod\); a drafter plugin's entry point goes in the group "
            r"sglang_spec_plugins \(\[project.entry-points.sglang_spec_plugins\] in its pyproject.toml; reinstall it "
            r"after the change\)")
    with pytest.raises(ConfigError, match=r"plugins.toml: \[plugins\] enable: " + said):
        discover(cfg(write_toml, "[plugins]\nenable = ['lost']\n"))
    with pytest.raises(ConfigError, match=r"\[algorithms.LOST\] plugin: " + said):
        discover(cfg(write_toml, "[algorithms.LOST]\nplugin = 'lost'\n"))
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS", "lost")
    with pytest.raises(ConfigError, match=r"SGLANG_SPEC_PLUGINS=lost: " + said):
        discover(cfg(write_toml, "[plugins]\n"))


def test_another_install_of_a_plugin_later_on_sys_path_is_named(site, write_toml, monkeypatch, cli, caplog):
    """skew-drafter 1.0 in one folder and 1.1 in another later on sys.path: Python loads 1.0 and never imports
    1.1; check, list and doctor say so, and the loader warns, naming both installs."""
    import importlib
    import sys

    from dists import make_dist
    from sglang_spec_plugins import loader

    site.add("skew-drafter", {"skew": "skew_mod"}, {"skew_mod": simple_plugin("SKEW")}, version="1.0")
    later = make_dist(site.path.parent / "later", "skew-drafter", {"skew": "skew_mod"},
                      {"skew_mod": simple_plugin("SKEW", width="2")}, version="1.1")
    monkeypatch.setattr(sys, "path", sys.path + [str(later)])
    importlib.invalidate_caches()
    toml = write_toml("[plugins]\nenable = ['skew']\n")
    said = (f"plugin 'skew' loads skew-drafter==1.0 from {site.path}, the first on sys.path; it shadows skew-drafter==1.1 "
            f"at {later}, which is never imported (pip install --user, another site-packages or PYTHONPATH): uninstall "
            "the one not meant to serve")
    ps = discover(cfg(write_toml, "[plugins]\nenable = ['skew']\n"))
    assert [p.label for p in ps.plugins] == ["skew (skew-drafter==1.0)"] and dict(ps.shadowed) == {"skew": said}
    assert said in json.loads(cli("list", "--json")[1])["notes"]
    assert f"note: {said}" in cli("check", toml, "-n", "4", "--single-process")[1]
    quiet = write_toml("[plugins]\nenable = ['skew']\n[algorithms.SKEW]\nenabled = false\n", "quiet.toml")
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS_CONFIG", str(quiet))  # nothing to register: SGLang is not touched
    loader._reset_for_tests()
    try:
        caplog.set_level("WARNING", logger="sglang_spec_plugins")
        loader.load()
    finally:
        loader._reset_for_tests()
    assert f"sglang-spec-plugins: {said}" in caplog.messages
