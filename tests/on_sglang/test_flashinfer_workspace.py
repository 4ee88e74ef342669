"""flashinfer's workspace against the verify graphs (issue 23's H200 finding), on SGLang's own
argument resolution: the release's variable and default read off its source, the need of each
(batch size, width) graph, and the start-up check and ``check`` refusing what overflowed on the H200
(SGLang 0.5.16, flashinfer 0.6.14, Llama-3-8B shape: width 16 at 128 requests stopped capture at
the default 384 MiB, ``batch_prefill_tmp_s``; 1 GiB served it; widths 2/4/8 at 128 and width 16
at 64 served at 384 MiB; benchmarks/results/e2e_speculative_h200.jsonl)."""

import json
import re

import pytest
from packaging.version import Version

from bad_inputs import WIDTH, bad_plugin, plugin_modules
from sglang_spec_plugins import cli
from sglang_spec_plugins.engine.flashinfer_workspace import workspace_setting
from sglang_spec_plugins.engine.probe import installed_version
from sglang_spec_plugins.errors import SpecPluginError
from sglang_spec_plugins.testing.cpu import reset_plugin_state, run_sglang_plugin_loading
from sglang_spec_plugins.verify_workspace import AttentionShape, verify_workspace_bytes

LLAMA_3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
              "num_hidden_layers": 2, "vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
              "rope_theta": 500000.0, "torch_dtype": "bfloat16"}
H200_SMS = 132
DEFAULT = 384 << 20


def test_the_release_names_its_variable_and_default():
    from sglang.srt.environ import envs

    setting = workspace_setting()
    assert setting.env == "SGLANG_FLASHINFER_WORKSPACE_SIZE"
    assert setting.default == DEFAULT
    field = type(envs).__dict__[setting.env]
    assert field.default == setting.default  # what SGLang itself falls back to
    assert setting.forced["Qwen3ForCausalLM"] == 512 << 20  # set over the operator's value by the backend
    assert "LlamaForCausalLM" not in setting.forced


@pytest.mark.parametrize("batch_size, width, fits", [(128, 16, False), (64, 16, True), (128, 8, True), (128, 4, True),
                                                     (128, 2, True), (1, 16, True)])
def test_the_h200_runs(batch_size, width, fits):
    need = verify_workspace_bytes(batch_size, width, AttentionShape(32, 8, 128), H200_SMS)
    assert (need <= DEFAULT) == fits
    assert need <= 1 << 30
    if not fits:  # tmp_v fit, tmp_s did not: the buffer flashinfer named
        assert need - need // 129 <= DEFAULT < need


@pytest.fixture
def bad(site, tmp_path, monkeypatch):
    """Plugin ``bad`` (algorithm BAD, one width: the ndt), loaded; its 8B-shaped target's folder."""
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.delenv("SGLANG_FLASHINFER_WORKSPACE_SIZE", raising=False)
    site.add("bad-drafter", {"bad": "bad_mod"}, plugin_modules("bad_mod", bad_plugin("startable")))
    (tmp_path / "plugins.toml").write_text(WIDTH + "[algorithms.BAD]\nmax_tokens_per_req = 16\n")
    monkeypatch.setenv("SGLANG_SPEC_PLUGINS_CONFIG", str(tmp_path / "plugins.toml"))
    model = tmp_path / "llama-3-8b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA_3_8B))
    reset_plugin_state()
    run_sglang_plugin_loading()
    yield model
    reset_plugin_state()


def _start(model, ndt, sizes):
    """SGLang's resolution of a command line with ``--cuda-graph-bs`` (``--cuda-graph-bs-decode`` on 0.5.16+)."""
    from sglang.srt.server_args import prepare_server_args

    flag = "--cuda-graph-bs-decode" if Version(installed_version()) >= Version("0.5.16") else "--cuda-graph-bs"
    args = prepare_server_args(["--model-path", str(model), "--device", "cpu", "--load-format", "dummy",
                                "--skip-tokenizer-init", "--speculative-algorithm", "BAD", "--speculative-num-draft-tokens",
                                str(ndt), "--disable-overlap-schedule", "--attention-backend", "flashinfer", flag,
                                *map(str, sizes)])
    if hasattr(args, "resolve_once"):  # 0.5.23: construction leaves the arguments unresolved
        args.resolve_once()
    return args


def test_start_up_refuses_width_16_at_128_requests(bad):
    with pytest.raises(SpecPluginError) as caught:
        _start(bad, 16, [1, 64, 128])
    assert re.search(r"TARGET_VERIFY at batch size 128 and width 16 \(ndt 16\) on flashinfer needs( at least \(.*\))? "
                     r"403685376 bytes .* more than the 402653184 bytes \(384 MiB\) SGLang \S+ allocates "
                     r"\(SGLANG_FLASHINFER_WORKSPACE_SIZE is not set: SGLang's default\).* "
                     r"set SGLANG_FLASHINFER_WORKSPACE_SIZE=469762048 \(448 MiB\) or more", str(caught.value)), caught.value
    assert "before loading any weights" in str(caught.value)


@pytest.mark.parametrize("ndt, sizes", [(16, [1, 64]), (8, [1, 64, 128]), (2, [128])])
def test_start_up_serves_what_served_on_the_h200(bad, ndt, sizes):
    assert _start(bad, ndt, sizes).speculative_num_draft_tokens == ndt


def test_the_variable_serves_it(bad, monkeypatch):
    monkeypatch.setenv("SGLANG_FLASHINFER_WORKSPACE_SIZE", str(1 << 30))
    assert _start(bad, 16, [1, 64, 128]).speculative_num_draft_tokens == 16


def test_check_says_it(bad, capsys):
    argv = ["check", "--json", "--single-process", "-n16", "--disable-overlap-schedule", "--attention-backend=flashinfer",
            "--model-path", str(bad), "--cuda-graph-bs", "1", "64"]
    assert cli.main(argv) == 0, capsys.readouterr().out
    capsys.readouterr()
    assert cli.main(argv + ["128"]) == 1
    problems = "\n".join(json.loads(capsys.readouterr().out)["problems"])
    assert "set SGLANG_FLASHINFER_WORKSPACE_SIZE=469762048 (448 MiB) or more" in problems, problems
