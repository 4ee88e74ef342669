"""Random plugins.toml documents, as text, as bytes and as TOML-shaped data:
each loads, or raises ConfigError whose every line names the file (and, for
a document that does not parse, the position). Nothing else escapes."""

import json
import re
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_spec_plugins import config
from sglang_spec_plugins.errors import ConfigError

POSITION = re.compile(r"\(at line \d+, column \d+\)|\(at end of document, line \d+\)|at line \d+, column \d+$")


def load_or_config_error(path):
    try:
        return config.load(path)
    except ConfigError as exc:
        assert exc.problems, "a ConfigError with no problem"
        for line in exc.problems:
            assert line.startswith(f"{path}: "), line
            if "not valid TOML" in line or "not UTF-8" in line:
                assert POSITION.search(line), line
        return None


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "plugins.toml"
    path.write_bytes(data)
    load_or_config_error(path)


TOKENS = list("[]{}=.,\"'#\n \t_-abcxAEGO0189") + ["\ufeff", "\u00e9", "true", "enable", "plugins", "algorithms",
                                                    "max_tokens_per_req", "on_error", "'skip'", "[[", "]]"]


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(st.sampled_from(TOKENS), max_size=40))
def test_random_toml_like_text(tmp_path_factory, tokens):
    text = "".join(tokens)
    path = tmp_path_factory.mktemp("fuzz") / "plugins.toml"
    path.write_text(text, encoding="utf-8")
    load_or_config_error(path)


KEYS = st.sampled_from(["enable", "disable", "on_error", "plugin", "enabled", "max_tokens_per_req", "max_token_per_req",
                        "verify_width", "block_size", "plugins", "x"])
NAMES = st.text(alphabet=string.ascii_letters + string.digits + "_-\u00e9", min_size=1, max_size=8)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)
DOCUMENTS = st.fixed_dictionaries(
    {},
    optional={
        "plugins": st.dictionaries(KEYS, VALUES, max_size=4) | VALUES,
        "algorithms": st.dictionaries(NAMES, st.dictionaries(KEYS, VALUES, max_size=4) | VALUES, max_size=3) | VALUES,
        "extra": VALUES,
    },
)


@settings(max_examples=400, deadline=None)
@given(document=DOCUMENTS)
def test_random_toml_shaped_documents(document):
    """``parse`` (what ``load`` hands the decoded document to) on any shape:
    a Config, or one ConfigError listing every problem, each naming the file."""
    document = json.loads(json.dumps(document))  # what a TOML decoder can hand over: no None inside
    try:
        parsed = config.parse(_no_none(document))
    except ConfigError as exc:
        assert exc.problems and all(line.startswith("plugins.toml: ") for line in exc.problems), exc.problems
        assert exc.partial is not None
        return
    assert parsed.on_error in config.ON_ERROR_CHOICES
    for name, table in parsed.algorithms.items():
        assert config.valid_algorithm_name(name) and name == name.upper()
        assert table.max_tokens_per_req is None or table.max_tokens_per_req >= 1


def _no_none(value):
    if isinstance(value, dict):
        return {k: _no_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_none(v) for v in value if v is not None]
    return value
