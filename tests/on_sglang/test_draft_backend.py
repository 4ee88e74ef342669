"""The attention backend SGLang's draft-worker builder gives a draft worker (issue 45 item 3): the probe
(``engine.facts.draft_backend``, read off the release's source) against the release's own function, run on
arguments that name each backend, and ``check``'s report of a draft worker on a backend its builder does not
take (it said the draft worker ran torch_native, while SGLang built it on flashinfer, which failed once both
models' weights had loaded)."""

import importlib
import inspect
import json

import pytest

import runner_drive
from sglang_spec_plugins.engine.facts import DRAFT_WORKER_BUILDER, draft_backend, draft_backend_rule
from sglang_spec_plugins.engine.worker_contract import contract


def sglang_resolution():
    """The release's own function that names a draft worker's backend (None before 0.5.16: no builder)."""
    try:
        module = importlib.import_module(DRAFT_WORKER_BUILDER)
    except ImportError:
        return None
    for name in ("resolve_draft_worker_attention_backend", "_resolve_draft_attention_backend_fallback"):
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(f"{DRAFT_WORKER_BUILDER} of SGLang {contract().release} names no draft backend resolution")


@pytest.mark.parametrize("named", ["torch_native", "triton", "flashinfer", "fa3", "trtllm_mha"])
def test_the_probe_says_what_the_release_gives_a_draft_worker(named):
    resolve = sglang_resolution()
    if resolve is None:
        assert draft_backend_rule() is None and draft_backend(named) == named  # the backend named, as is
        pytest.skip(f"SGLang {contract().release} has no draft-worker builder: a draft worker runs the backend named")
    with runner_drive.published(attention_backend=named, prefill_attention_backend=named,
                                speculative_draft_attention_backend=None) as server_args:
        takes = inspect.signature(resolve).parameters  # 0.5.16-0.5.18 hand it the arguments
        given = resolve(algo_label="DFLASH_BLOCK", **({"draft_server_args": server_args}
                                                      if "draft_server_args" in takes else {}))
    assert draft_backend(named) == given, (named, given, draft_backend_rule())


@pytest.mark.sglang
def test_check_says_the_draft_worker_runs_the_backend_the_builder_gives_it(cli, tmp_path):
    rule = draft_backend_rule()
    if rule is None:
        pytest.skip(f"SGLang {contract().release} has no draft-worker builder")
    config = tmp_path / "plugins.toml"
    config.write_text("[plugins]\nenable = ['dflash_block']\n")
    report = json.loads(cli("check", config, "-n", "4", "--single-process", "--disable-overlap-schedule",
                            "--attention-backend", "torch_native", "--json")[1])
    draft = report["sglang"]["backends"]["DFLASH_BLOCK"]["4"]["draft worker"]["torch_native"]
    assert draft["runs_on"] == rule[1] == "flashinfer", draft
    assert draft["reason"].startswith(f"SGLang {contract().release}'s draft workers run flashinfer for it (they take "
                                      f"{', '.join(rule[0])}): flashinfer "), draft
