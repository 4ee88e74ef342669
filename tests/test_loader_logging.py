"""The loader's level for its own logger, set before SGLang configures logging (loader._set_level): the answers
``Logger.setLevel`` would give, with only our loggers' cached answers forgotten."""

import logging

from sglang_spec_plugins import loader


def test_our_loggers_answer_as_after_setlevel_and_no_other_cache_is_emptied():
    ours, below, other = (logging.getLogger(n) for n in ("sglang_spec_plugins", "sglang_spec_plugins.a_plugin", "elsewhere"))
    was = ours.level
    try:
        ours.setLevel(logging.WARNING)
        other.setLevel(logging.WARNING)  # whatever the root logger's level is in this process
        for each in (ours, below, other):
            assert not each.isEnabledFor(logging.INFO)  # cached
        loader._set_level(logging.INFO)
        assert ours.level == logging.INFO and ours.isEnabledFor(logging.INFO) and below.isEnabledFor(logging.INFO)
        assert not ours.isEnabledFor(logging.DEBUG) and other._cache == {logging.INFO: False}
    finally:
        ours.setLevel(was)
        other.setLevel(logging.NOTSET)
