"""plugins.toml documents kept between processes (toml_documents.py): the same document as parsing gives,
never an error kept, nothing JSON cannot hold exactly."""

import sys

import pytest

from sglang_spec_plugins import config, toml_documents
from sglang_spec_plugins.cache_entries import CACHE_ENV

TEXT = """[plugins]
enable = ["sbd"]
[algorithms.SBD]
max_tokens_per_req = 8
widths_by_batch_size = {1 = 8, 16 = 4}
ratio = 0.5
"""


def _not_parsed(text):
    raise AssertionError("a kept document is not parsed")


kept = pytest.mark.skipif(sys.version_info < (3, 11), reason="on Python 3.10 (tomli, whose release is not in the key) "
                          "every process parses: test_on_python_3_10_nothing_is_kept")


@kept
def test_a_later_read_of_the_same_text_takes_the_kept_document(monkeypatch, tmp_path, write_toml):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = write_toml(TEXT)
    parsed = config.load(path)
    assert [p.name for p in (tmp_path / "cache").iterdir()] and parsed.algorithms["SBD"].max_tokens_per_req == 8
    monkeypatch.setattr(toml_documents, "_parse", _not_parsed)
    assert config.load(path) == parsed
    path.write_text(TEXT.replace("= 8\n", "= 9\n"))  # another text: parsed
    with pytest.raises(AssertionError, match="not parsed"):
        config.load(path)


def test_an_invalid_text_is_an_error_in_every_process(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    for _ in range(2):
        with pytest.raises(toml_documents.TOMLError, match="line 1"):
            toml_documents.loads("[plugins\n")
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("text", ["when = 1979-05-27T07:32:00Z\n", "x = nan\n", "t = 07:32:00\n"])
def test_a_document_json_cannot_hold_exactly_is_parsed_every_time(monkeypatch, tmp_path, text):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    first = toml_documents.loads(text)
    assert not (tmp_path / "cache").exists()
    assert repr(toml_documents.loads(text)) == repr(first)


@kept
def test_a_foreign_entry_or_the_cache_off_parses(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    toml_documents.loads(TEXT)
    (entry,) = (tmp_path / "cache").iterdir()
    entry.write_text('{"key": "another", "value": {}}')
    assert toml_documents.loads(TEXT)["algorithms"]["SBD"]["max_tokens_per_req"] == 8
    monkeypatch.setenv(CACHE_ENV, "off")
    monkeypatch.setattr(toml_documents, "_parse", _not_parsed)
    with pytest.raises(AssertionError, match="not parsed"):
        toml_documents.loads(TEXT)


@pytest.mark.skipif(sys.version_info >= (3, 11), reason="Python 3.11+ keeps documents (the tests above)")
def test_on_python_3_10_nothing_is_kept(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    for _ in range(2):
        assert toml_documents.loads(TEXT)["algorithms"]["SBD"]["max_tokens_per_req"] == 8
    assert not (tmp_path / "cache").exists()
