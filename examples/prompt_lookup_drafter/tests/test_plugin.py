"""PROMPT_LOOKUP's hooks; the conformance kit (pyproject.toml) adds its checks."""

import pytest

from prompt_lookup_drafter import plugin


def test_width_is_the_setting_else_num_draft_tokens():
    assert plugin.sgl_spec_verify_width("PROMPT_LOOKUP", 4, {"verify_width": 2}) == 2
    assert plugin.sgl_spec_verify_width("PROMPT_LOOKUP", 4, {}) == 4
    assert plugin.sgl_spec_verify_width("SBD", 4, {"verify_width": 2}) is None


@pytest.mark.parametrize("settings, message", [
    ({"max_ngram": 0}, r"max_ngram = 0: it must be an int >= 1"),
    ({"min_ngram": "2"}, r"min_ngram = '2': it must be an int >= 1"),
    ({"min_ngram": 4, "max_ngram": 2}, r"min_ngram = 4 is above max_ngram = 2"),
])
def test_bad_ngram_settings_are_refused_naming_the_key(settings, message):
    with pytest.raises(ValueError, match=message):
        plugin.sgl_spec_verify_width("PROMPT_LOOKUP", 4, settings)
