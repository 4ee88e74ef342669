"""The worker contract kept between processes (engine/source_cache.py) is the
one read off the release, and a cache that is corrupt or cannot be written
never changes what the start-up check SGLang calls decides."""

import pytest

from bad_inputs import resolve_server_args
from sglang_spec_plugins.engine import worker_contract
from sglang_spec_plugins.engine.source_cache import CACHE_ENV

PROMPT_LOOKUP = """
[plugins]
enable = ["prompt_lookup"]
[algorithms.PROMPT_LOOKUP]
max_tokens_per_req = 4
widths_by_batch_size = {1 = 4, 8 = 2}
"""


@pytest.fixture
def fresh_contract(monkeypatch, tmp_path):
    """``fresh_contract(cache)`` -> contract() as a new process reads it, with the cache at ``cache`` (or "off")."""

    def read(cache):
        monkeypatch.setenv(CACHE_ENV, str(cache))
        worker_contract.contract.cache_clear()
        return worker_contract.contract()

    yield read
    worker_contract.contract.cache_clear()


def test_the_entry_holds_the_contract_read_off_the_release(fresh_contract, tmp_path, monkeypatch):
    computed = fresh_contract("off")
    assert fresh_contract(tmp_path / "cache") == computed  # a miss: computed and written
    assert len(list((tmp_path / "cache").iterdir())) == 1

    def not_read(*args):
        raise AssertionError("a hit reads nothing off the source")

    monkeypatch.setattr(worker_contract, "_read_contract", not_read)
    hit = fresh_contract(tmp_path / "cache")
    assert hit == computed
    assert hit.required_reads == computed.required_reads and hit.worker_reads  # the reads came back whole


def _outcome():
    """What SGLang's argument resolution does with PROMPT_LOOKUP at ndt 4: 'ok' or the error it raised."""
    try:
        resolve_server_args(speculative_algorithm="PROMPT_LOOKUP", speculative_num_draft_tokens=4,
                            disable_overlap_schedule=True)
        return "ok"
    except Exception as exc:  # on 0.5.12-0.5.13 the plugin's own validator refuses: the same either way
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("cache", ["corrupt", "unwritable", "off"])
def test_the_start_up_check_decides_the_same_with_a_bad_cache(sglang_loaded, fresh_contract, tmp_path, monkeypatch, cache):
    sglang_loaded(PROMPT_LOOKUP)
    fresh_contract(tmp_path / "good")
    expected = _outcome()
    if cache == "corrupt":
        where = tmp_path / "corrupt"
        fresh_contract(where)
        for entry in where.iterdir():
            entry.write_bytes(entry.read_bytes()[:100])  # torn
    elif cache == "unwritable":
        (tmp_path / "plain").write_text("a file")
        where = tmp_path / "plain" / "cache"
    else:
        where = "off"
    monkeypatch.setenv(CACHE_ENV, str(where))
    worker_contract.contract.cache_clear()  # the validator meets the bad cache
    assert _outcome() == expected
    if cache == "corrupt":
        assert [e.stat().st_size > 100 for e in where.iterdir()] == [True]  # computed again and replaced
