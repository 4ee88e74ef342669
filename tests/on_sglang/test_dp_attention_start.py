"""Widths by batch size with DP attention (issue 24 item 3), on SGLang's own
resolution of the command line (``bad_inputs.resolve_server_args``): refused
where the release resolves DP attention, however the operator spells it
(the refusals themselves are bad-input cases); one width in every bucket is
one width, served with DP attention; and ``check`` without ``-n`` finds the
refusal at the ndts it checks by default."""

import json
import re

import pytest

from bad_inputs import DP_ATTENTION, FLAGS, NOT_WITH_DP, WIDTH, bad_plugin, plugin_modules, resolve_server_args
from sglang_spec_plugins import cli
from sglang_spec_plugins.testing.cpu import reset_plugin_state, run_sglang_plugin_loading


@pytest.fixture
def widths(site, tmp_path, monkeypatch):
    """``widths(buckets)``: plugin ``bad`` (algorithm BAD) with ``widths_by_batch_size = buckets``, loaded."""
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    site.add("bad-drafter", {"bad": "bad_mod"}, plugin_modules("bad_mod", bad_plugin("startable")))

    def load(buckets):
        (tmp_path / "plugins.toml").write_text(WIDTH + f"[algorithms.BAD]\nmax_tokens_per_req = 4\nwidths_by_batch_size = {buckets}\n")
        monkeypatch.setenv("SGLANG_SPEC_PLUGINS_CONFIG", str(tmp_path / "plugins.toml"))
        reset_plugin_state()
        run_sglang_plugin_loading()

    yield load
    reset_plugin_state()


@pytest.mark.parametrize("buckets", ["{1 = 4}", "{1 = 4, 8 = 4}"])
def test_one_width_in_every_bucket_is_served_with_dp_attention(widths, buckets, capsys):
    widths(buckets)
    args = resolve_server_args(**FLAGS, **DP_ATTENTION, attention_backend="triton")
    assert args.speculative_algorithm == "BAD"
    assert cli.main(["check", "--json", "--single-process", "-n4", "--enable-dp-attention", "--disable-overlap-schedule",
                     "--attention-backend=triton"]) == 0, capsys.readouterr().out


def test_check_without_n_refuses_widths_by_batch_with_dp_attention(widths, capsys):
    widths("{1 = 4, 8 = 2}")
    assert cli.main(["check", "--json", "--single-process", "--enable-dp-attention", "--disable-overlap-schedule"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert any(re.search(r"algorithm BAD: \[algorithms.BAD\] widths_by_batch_size in \S+ gives widths by batch size "
                         r"\{1 = 4, 8 = 2\}, " + NOT_WITH_DP, p) for p in problems), problems


def test_check_takes_attn_dp_size(widths, capsys):
    widths("{1 = 4, 8 = 2}")
    assert cli.main(["check", "--json", "--single-process", "-n4", "--attn-dp-size", "2", "--disable-overlap-schedule"]) == 1
    assert re.search(NOT_WITH_DP, "\n".join(json.loads(capsys.readouterr().out)["problems"]))
    assert cli.main(["check", "--json", "--single-process", "-n4", "--attn-dp-size", "1", "--disable-overlap-schedule",
                     "--attention-backend=flashinfer"]) == 0, capsys.readouterr().out
