"""tools/gpu/soak.py starts sglang.Engine with keyword arguments and SGLang's HTTP server with the same
settings as flags: both are the release's own server arguments (no GPU here: parsed, not served)."""

import argparse
import inspect
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "gpu"))
import soak  # noqa: E402


def test_the_soaks_engine_arguments_and_server_flags_are_the_releases_own():
    from sglang.srt.server_args import ServerArgs

    plain = types.SimpleNamespace(max_total_tokens=8192, concurrency=128, cuda_graph=False, algorithm="PROMPT_LOOKUP",
                                  draft=None, mix=soak.parse_mix("sampled=0.3,logprob=0.1,abort=0.05"), sync=False,
                                  mem_fraction=0.2)
    drafted = types.SimpleNamespace(**dict(vars(plain), algorithm="DFLASH_BLOCK", draft="/tmp/draft", sync=True))
    schema = types.SimpleNamespace(**dict(vars(plain), algorithm="FAULTY_LOOKUP", mix=soak.parse_mix("json=0.1"),
                                          mem_fraction=0.12))
    for options, spec in ((plain, False), (plain, True), (drafted, True), (schema, True)):
        kwargs = soak.engine_kwargs(options, spec)
        assert set(kwargs) <= set(inspect.signature(ServerArgs).parameters)
        assert {"attention_backend", "disable_cuda_graph", "max_total_tokens", "disable_radix_cache"} <= set(kwargs)
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        parsed = vars(parser.parse_args(soak.server_flags(kwargs)))
        assert {name: parsed[name] for name in kwargs} == kwargs
        # overlap as SGLang's default unless --sync; a tokenizer where JSON-schema requests come
        assert kwargs["disable_overlap_schedule"] is options.sync
        assert kwargs["skip_tokenizer_init"] is (options is not schema)
        assert kwargs["mem_fraction_static"] == options.mem_fraction
