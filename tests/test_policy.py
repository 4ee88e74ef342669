"""VerifyPolicy: answers validated once, cached, and blamed on the right plugin."""

import pytest

from dists import simple_plugin
from sglang_spec_plugins import config
from sglang_spec_plugins.errors import ConfigError, PluginError
from sglang_spec_plugins.plugins import discover
from sglang_spec_plugins.policy import VerifyPolicy


def policy_for(site, write_toml, extra_toml="", **hooks):
    site.add("p-drafter", {"p": "p_mod"}, {"p_mod": simple_plugin("ALGO", **hooks)})
    ps = discover(config.load(write_toml("[plugins]\nenable = ['p']\n" + extra_toml)))
    return VerifyPolicy(ps, ps.algorithms["ALGO"])


def test_defaults_follow_sglang(site, write_toml):
    policy = policy_for(site, write_toml)
    assert policy.width(8, False) == 8
    assert policy.max_width(8) == 8
    assert policy.draft_may_verify() is False


def test_width_from_settings_and_ceiling(site, write_toml):
    policy = policy_for(site, write_toml, "[algorithms.ALGO]\nmax_tokens_per_req = 16\nw = 12\n", width="settings['w']")
    assert policy.width(8, False) == 12
    assert policy.max_width(8) == 16


def test_answers_are_cached_per_argument_tuple(site, write_toml):
    policy = policy_for(site, write_toml, width="num_draft_tokens // 2", draft="True")
    import p_mod

    calls = []
    original = p_mod.sgl_spec_verify_width

    def counting(algorithm, num_draft_tokens, is_draft_worker, settings):
        calls.append((num_draft_tokens, is_draft_worker))
        return original(algorithm, num_draft_tokens, is_draft_worker, settings)

    impl = next(i for i in policy._plugins.pm.hook.sgl_spec_verify_width.get_hookimpls() if i.plugin_name == "p")
    impl.function = counting
    for _ in range(3):
        assert policy.width(8, False) == 4
        assert policy.width(8, True) == 4
        assert policy.width(16, False) == 8
    assert calls == [(8, False), (8, False), (8, True), (8, True), (16, False), (16, False)]  # asked twice, then cached


@pytest.mark.parametrize(
    "hooks, extra, message",
    [
        ({"width": "0"}, "", r"sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) returned 0; it must be an int from 1 to the maximum width 8"),
        ({"width": "9"}, "", r"returned 9; it must be an int from 1 to the maximum width 8"),
        ({"width": "4.0"}, "", r"returned 4.0, a float, not an int; it must be an int from 1 to the maximum width 8"),
        ({"width": "True"}, "", r"returned True, a bool, not an int; it must be an int"),
        ({"width": "17"}, "[algorithms.ALGO]\nmax_tokens_per_req = 16\n", r"returned 17; .* maximum width 16"),
        ({"max_width": "4"}, "", r"sgl_spec_max_verify_width\(num_draft_tokens=8\) returned 4; the maximum width must be an int >= num_draft_tokens=8"),
        ({"max_width": "32"}, "[algorithms.ALGO]\nmax_tokens_per_req = 16\n", r"sgl_spec_max_verify_width\(num_draft_tokens=8\) returned 32, above \[algorithms.ALGO\] max_tokens_per_req = 16 in .*plugins.toml"),
        ({"max_width": "65"}, "", r"returned 65, above 64, the most allowed without a cap; an operator allows it with \[algorithms.ALGO\] max_tokens_per_req"),
        ({"width": "'4'"}, "", r"returned '4', a str, not an int; it must be an int"),
        ({"width": "None"}, "", r"sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) returned None for its own algorithm ALGO; hooks receive the name upper case"),
        ({"width": "next(globals().setdefault('calls', __import__('itertools').count(1)))"}, "", r"answered 1, then 2 for the same arguments; answers must be pure"),
        ({"width": "4 if is_draft_worker else 2", "max_width": "num_draft_tokens // 2"}, "", r"returned 4; the maximum width must be an int >= num_draft_tokens=8"),
        ({"width": "2 if not is_draft_worker else 9"}, "", r"sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=True\) returned 9; it must be an int from 1 to the maximum width 8"),
        ({"width": "exit(3)"}, "", r"sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) raised SystemExit \(it called sys.exit\(3\)\)"),
        ({"width": "1 // 0"}, "", r"sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) raised ZeroDivisionError"),
    ],
)
def test_bad_width_answers_name_the_plugin(site, write_toml, hooks, extra, message):
    policy = policy_for(site, write_toml, extra, **hooks)
    with pytest.raises(PluginError, match=message) as info:
        policy.validate(8)
    assert info.value.plugin == "p"
    assert str(info.value).startswith("plugin 'p' (p-drafter==1.0): algorithm ALGO: ")


def test_a_cap_below_num_draft_tokens_is_the_files_fault(site, write_toml):
    policy = policy_for(site, write_toml, "[algorithms.ALGO]\nmax_tokens_per_req = 4\n")
    with pytest.raises(ConfigError, match=r"\[algorithms.ALGO\] max_tokens_per_req = 4 in .*plugins.toml is below speculative_num_draft_tokens=8; raise it to at least 8"):
        policy.validate(8)


def test_draft_answer_must_be_bool(site, write_toml):
    policy = policy_for(site, write_toml, draft="'yes'")
    with pytest.raises(PluginError, match=r"sgl_spec_draft_may_verify\(\) returned 'yes', a str, not a bool; it must be a bool"):
        policy.draft_may_verify()


def test_bad_num_draft_tokens(site, write_toml):
    policy = policy_for(site, write_toml)
    with pytest.raises(ValueError, match="speculative_num_draft_tokens must be a positive int, got None"):
        policy.width(None, False)


def test_a_plugin_answering_for_another_plugins_algorithm_is_blamed(site, write_toml):
    site.add("owner", {"owner": "owner_mod"}, {"owner_mod": simple_plugin("MINE", width="4")})
    greedy = simple_plugin("OTHER") + "\n@hookimpl(specname='sgl_spec_verify_width')\ndef answers_everything(num_draft_tokens):\n    return 1\n"
    site.add("greedy", {"greedy": "greedy_mod"}, {"greedy_mod": greedy})
    ps = discover(config.load(write_toml("[plugins]\nenable = ['owner', 'greedy']\n")))
    policy = VerifyPolicy(ps, ps.algorithms["MINE"])
    with pytest.raises(PluginError, match=r"plugin 'greedy' \(greedy==1.0\): sgl_spec_verify_width answered 1 for algorithm MINE, which plugin 'owner' owns"):
        policy.width(8, False)


# -- widths by batch size ----------------------------------------------------

def test_widths_by_batch_from_the_plugin(site, write_toml):
    policy = policy_for(site, write_toml, "[algorithms.ALGO]\nmax_tokens_per_req = 16\n",
                        widths="{1: 16, 8: 8, 64: 4} if not is_draft_worker else None")
    buckets = policy.widths_by_batch_size(8, False)
    assert [buckets.at(n) for n in (1, 8, 64)] == [16, 8, 4]
    assert policy.width(8, False) == 16  # SGLang sizes capture buffers with the largest
    assert policy.candidate_widths(8, False) == (4, 8, 16)
    assert policy.widths_by_batch_size(8, True) is None and policy.candidate_widths(8, True) == (8,)  # None: the static answer
    schedule = policy.schedule(8, False, capture_sizes=[1, 2, 4, 8, 16, 32, 64])
    assert [schedule.width(n) for n in (5, 64, 3)] == [8, 4, 16]  # 5 pads to 8: bucket 8; 3 pads to 4: bucket 1


def test_widths_by_batch_from_plugins_toml_win_over_the_plugin(site, write_toml):
    policy = policy_for(site, write_toml, "[algorithms.ALGO]\nwidths_by_batch_size = {1 = 8, 32 = 2}\n",
                        widths="{1: 4}")
    assert policy.widths_by_batch_size(8, False).as_plain() == {"1": 8, "32": 2}
    assert policy.widths_by_batch_size(8, True).as_plain() == {"1": 8, "32": 2}


def test_widths_by_batch_asked_twice_then_cached(site, write_toml):
    policy = policy_for(site, write_toml, widths="{1: 8, 4: 2}")
    import p_mod

    calls = []
    original = p_mod.sgl_spec_widths_by_batch_size

    def counting(algorithm, num_draft_tokens, is_draft_worker, settings):
        calls.append((num_draft_tokens, is_draft_worker))
        return original(algorithm, num_draft_tokens, is_draft_worker, settings)

    impl = next(i for i in policy._plugins.pm.hook.sgl_spec_widths_by_batch_size.get_hookimpls() if i.plugin_name == "p")
    impl.function = counting
    for _ in range(3):
        assert policy.widths_by_batch_size(8, False).maximum == 8
    assert calls == [(8, False), (8, False)]


@pytest.mark.parametrize("widths, message", [
    ("{1: 16}", r"sgl_spec_widths_by_batch_size\(num_draft_tokens=8, is_draft_worker=False\) returned \{1 = 16\}; width 16 is "
                r"above the maximum width 8"),
    ("{2: 4}", r"returned \{2: 4\}, not widths by batch size: the smallest bucket must start at batch size 1 \(got 2\)"),
    ("{1: 0}", r"returned \{1: 0\}, not widths by batch size: width for batch size 1 must be a positive integer, got 0"),
    ("[8, 4]", r"returned \[8, 4\], not widths by batch size: expected a non-empty mapping"),
    ("{1: 4} if __import__('random').random() < 2 and not hasattr(__import__('builtins'), '_n') and "
     "not setattr(__import__('builtins'), '_n', 1) else {1: 2}",
     r"sgl_spec_widths_by_batch_size\(num_draft_tokens=8, is_draft_worker=False\) answered \{1 = 4\}, then \{1 = 2\} for the same arguments; answers must be pure"),
])
def test_bad_widths_by_batch_name_the_plugin(site, write_toml, widths, message):
    policy = policy_for(site, write_toml, widths=widths)
    with pytest.raises(PluginError, match=r"plugin .p. \(p-drafter==1.0\): algorithm ALGO: (sgl_spec_widths_by_batch_size\(num_draft_tokens=8, is_draft_worker=False\) )?" + message):
        policy.validate(8)


def test_widths_by_batch_in_plugins_toml_above_the_maximum_is_the_files_fault(site, write_toml):
    policy = policy_for(site, write_toml, "[algorithms.ALGO]\nwidths_by_batch_size = {1 = 16, 8 = 4}\n")
    with pytest.raises(ConfigError, match=r"\[algorithms.ALGO\] widths_by_batch_size = \{1 = 16, 8 = 4\} in .*plugins.toml: "
                                          r"width 16 is above the maximum width 8 at speculative_num_draft_tokens=8; "
                                          r"lower it, or raise the maximum \(max_tokens_per_req"):
        policy.validate(8)


def test_a_widths_answer_is_read_once_through_items(site, write_toml):
    """What a plugin returns as widths by batch size is read through its ``items()`` only: a mapping whose
    ``len()`` raises is served; one whose ``items()`` raises is the plugin's fault, by name."""
    faulty = ("class Widths(dict):\n    def __len__(self):\n        raise RuntimeError('no len')\n"
              "class NoItems(dict):\n    def items(self):\n        raise RuntimeError('no items')\n")
    site.add("p-drafter", {"p": "p_mod"}, {"p_mod": faulty + simple_plugin(
        "ALGO", widths="Widths({1: 4, 8: 2}) if num_draft_tokens == 4 else NoItems({1: 2})")})
    ps = discover(config.load(write_toml("[plugins]\nenable = ['p']\n[algorithms.ALGO]\nmax_tokens_per_req = 4\n")))
    policy = VerifyPolicy(ps, ps.algorithms["ALGO"])
    assert str(policy.widths_by_batch_size(4, False)) == "{1 = 4, 8 = 2}" and policy.width(4, False) == 4
    with pytest.raises(PluginError, match=r"plugin 'p' \(p-drafter==1.0\): algorithm ALGO: reading what "
                       r"sgl_spec_widths_by_batch_size\(num_draft_tokens=2, is_draft_worker=False\) returned "
                       r"\(a p_mod.NoItems\) raised RuntimeError: no items"):
        policy.widths_by_batch_size(2, False)


PICKS = """
from sglang_spec_plugins import AlgorithmSpec, hookimpl

class Worker:
    pass

def picks(settings):
    return {picks}

@hookimpl
def sgl_spec_algorithms():
    return [AlgorithmSpec(name="ALGO", worker_factory=lambda server_args: Worker, picks_widths=picks)]
"""
CHOICES = "[algorithms.ALGO]\nmax_tokens_per_req = 8\nwidths_by_batch_size = {1 = [2, 4, 8]}\n"


def picking_policy(site, write_toml, picks, extra=""):
    site.add("p-drafter", {"p": "p_mod"}, {"p_mod": PICKS.format(picks=picks)})
    ps = discover(config.load(write_toml("[plugins]\nenable = ['p']\n" + CHOICES + extra)))
    return VerifyPolicy(ps, ps.algorithms["ALGO"])


@pytest.mark.parametrize("picks, extra, chosen_by", [
    ("'cycle' in settings", "cycle = 1\n", "worker"),
    ("'cycle' in settings", "", "nobody"),
    ("False", "widths_by_acceptance = true\n", "acceptance controller"),
])
def test_who_chooses_a_steps_width_among_its_buckets(site, write_toml, picks, extra, chosen_by):
    """The worker where its picks_widths answers True for the settings; else the controller where plugins.toml
    turns it on, else nobody (the bucket's largest)."""
    assert picking_policy(site, write_toml, picks, extra).chosen_by(4, False) == chosen_by


def test_nobody_chooses_where_no_bucket_gives_several_widths(site, write_toml):
    assert policy_for(site, write_toml, "[algorithms.ALGO]\nwidths_by_batch_size = {1 = 4, 8 = 2}\n").chosen_by(4, False) \
        is None


def test_the_controller_on_a_worker_that_picks_its_widths_is_the_files_fault(site, write_toml):
    policy = picking_policy(site, write_toml, "True", "widths_by_acceptance = true\n")
    with pytest.raises(ConfigError, match=r"\[algorithms.ALGO\] widths_by_acceptance in .*plugins.toml: the worker of ALGO "
                                          r"picks each step's width itself \(AlgorithmSpec picks_widths of plugin 'p', "
                                          r"with these settings\), so the acceptance controller would never choose one; "
                                          r"remove widths_by_acceptance"):
        policy.validate(4)


@pytest.mark.parametrize("picks, message", [
    ("1", r"plugin 'p' \(p-drafter==1.0\): algorithm ALGO: AlgorithmSpec picks_widths\(settings\) returned 1, a int, not "
          r"a bool; it must be True or False"),
    ("settings['missing']", r"plugin 'p' \(p-drafter==1.0\): algorithm ALGO: AlgorithmSpec picks_widths\(settings\) "
                            r"raised KeyError: 'missing'"),
])
def test_a_picks_widths_function_that_answers_wrongly_is_the_plugins_fault(site, write_toml, picks, message):
    with pytest.raises(PluginError, match=message):
        picking_policy(site, write_toml, picks).picks_widths()


def test_picks_widths_must_be_a_bool_or_a_function():
    from sglang_spec_plugins import AlgorithmSpec

    with pytest.raises(ValueError, match=r"AlgorithmSpec 'X': picks_widths must be True, False or a function of the "
                                         r"algorithm's settings answering one of them, got 'yes'"):
        AlgorithmSpec(name="X", worker_factory=lambda args: None, picks_widths="yes")


def test_the_plugin_plugins_toml_chooses_among_two_offering_an_algorithm_serves_it(site, write_toml):
    """Two plugins offer SAME and answer its width; plugins.toml names one with plugin = "...": the other is not
    an intruder for answering its own hook (it offers SAME too), and the chosen one's answers are served."""
    from sglang_spec_plugins.policy import build_policies

    site.add("one", {"one": "one_mod"}, {"one_mod": simple_plugin("SAME", width="2", draft="True")})
    site.add("two", {"two": "two_mod"}, {"two_mod": simple_plugin("SAME", width="3", draft="False")})
    for chosen, width in (("one", 2), ("two", 3)):
        ps = discover(config.load(write_toml(f"[plugins]\nenable = ['one', 'two']\n[algorithms.SAME]\nplugin = '{chosen}'\n")))
        ps, policies = build_policies(ps, tolerate=False)
        assert policies["SAME"].plugin == chosen and policies["SAME"].width(8, False) == width
        assert policies["SAME"].draft_may_verify() is (chosen == "one")
