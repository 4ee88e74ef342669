"""The drafting rule, the plugin's settings and the record (pure: no SGLang)."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlled_acceptance_drafter import plugin, record
from controlled_acceptance_drafter.draws import CHECKED_TAIL, drafts, keep_pattern, kept, prompt_key

RECORDED = str(Path(__file__).with_name("continuations.json"))
"""The committed record, wherever the tests run from."""

CONTINUATION = list(range(100, 164))


def test_keys_and_draws_are_the_same_in_every_process():
    assert prompt_key([1, 2, 3]) == prompt_key((1, 2, 3)) != prompt_key([1, 2, 4])
    assert len(prompt_key([])) == 16
    assert [kept(0, "k", i, 0.5) for i in range(6)] == [kept(0, "k", i, 0.5) for i in range(6)]
    assert kept(0, "k", 3, 1.0) and not kept(0, "k", 3, 0.0)


@settings(max_examples=20)
@given(st.floats(0.05, 0.95), st.integers(0, 1000))
def test_the_share_of_kept_tokens_is_the_acceptance(acceptance, seed):
    share = sum(kept(seed, "prompt", i, acceptance) for i in range(4000)) / 4000
    assert abs(share - acceptance) < 0.05


@given(st.integers(1, 40), st.integers(1, 16), st.floats(0.0, 1.0))
def test_drafts_follow_the_continuation_kept_or_wrong(done, count, acceptance):
    out = drafts(CONTINUATION, keep_pattern(7, "p", len(CONTINUATION), acceptance), CONTINUATION[:done], count, 1000)
    if done + count > len(CONTINUATION):
        assert out is None
        return
    assert len(out) == count
    for j, token in enumerate(out):
        right = CONTINUATION[done + j]
        assert token == (right if kept(7, "p", done + j, acceptance) else right + 1)


def test_the_pattern_does_not_depend_on_the_width():
    """What a verify of 8 drafts keeps, a verify of 4 keeps at the same positions."""
    keep = keep_pattern(1, "p", len(CONTINUATION), 0.5)
    wide = drafts(CONTINUATION, keep, CONTINUATION[:10], 8, 1000)
    assert drafts(CONTINUATION, keep, CONTINUATION[:10], 4, 1000) == wide[:4]
    assert drafts(CONTINUATION, keep, CONTINUATION[:14], 4, 1000) == wide[4:]


def test_an_output_that_left_the_continuation_is_not_followed():
    every = [True] * len(CONTINUATION)
    left = CONTINUATION[:20]
    left[-1] += 1
    assert drafts(CONTINUATION, every, left, 4, 1000) is None
    early = CONTINUATION[:20]
    early[20 - CHECKED_TAIL - 1] += 1  # older than the checked tail: followed
    assert drafts(CONTINUATION, every, early, 4, 1000) == CONTINUATION[20:24]
    assert drafts(CONTINUATION, every, [163], 1, 1000) is None  # not this continuation's start


def test_a_token_not_kept_is_never_the_continuation_s():
    assert drafts([999, 5], [False, False], [999], 1, 1000) == [6]
    assert drafts([5, 999], [False, False], [5], 1, 1000) == [0]  # wraps around the vocabulary


@pytest.mark.parametrize("settings_, message", [
    ({}, r"continuations = None: give the JSON file"),
    ({"continuations": RECORDED, "acceptance": 1.5}, r"acceptance = 1.5: the acceptance must be a number from 0 to 1"),
    ({"continuations": RECORDED, "acceptance": "high"}, r"acceptance = 'high'"),
    ({"continuations": RECORDED, "seed": 1.5}, r"seed = 1.5: it must be an int"),
    ({"continuations": RECORDED, "width_cycle": [2, 5]}, r"width_cycle = \[2, 5\]: give a list of widths, each an int from 1 to speculative_num_draft_tokens \(4\)"),
    ({"continuations": RECORDED, "width_cycle": []}, r"width_cycle = \[\]"),
    ({"continuations": RECORDED, "width_cycle": [2, True]}, r"width_cycle = \[2, True\]"),
    ({"continuations": RECORDED, "width_cycle": [2], "width_cycle_steps": 0}, r"width_cycle_steps = 0: it must be an int >= 1"),
    ({"continuations": RECORDED, "width_cycle_steps": 4}, r"width_cycle_steps = 4: it takes a width_cycle"),
])
def test_bad_settings_are_refused_naming_the_key(settings_, message):
    with pytest.raises(ValueError, match=r"\[algorithms.CONTROLLED_ACCEPTANCE\] " + message):
        plugin.sgl_spec_verify_width("CONTROLLED_ACCEPTANCE", 4, settings_)


def test_a_width_cycle_is_its_widths_and_steps_per_width():
    assert plugin.width_cycle_of({}, 8) is None
    assert plugin.width_cycle_of({"width_cycle": [4, 8]}, 8) == ((4, 8), 1)
    assert plugin.width_cycle_of({"width_cycle": [4, 8], "width_cycle_steps": 16}, 8) == ((4, 8), 16)


def test_width_and_other_algorithms(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("{}")
    assert plugin.sgl_spec_verify_width("CONTROLLED_ACCEPTANCE", 4, {"continuations": str(path), "verify_width": 2}) == 2
    assert plugin.sgl_spec_verify_width("PROMPT_LOOKUP", 4, {}) is None
    with pytest.raises(ValueError, match=r"continuations = '.*missing.json': cannot be read as JSON"):
        plugin.sgl_spec_verify_width("CONTROLLED_ACCEPTANCE", 4, {"continuations": str(tmp_path / "missing.json")})


def test_the_record_round_trips_and_refuses_two_outputs_for_one_prompt(tmp_path):
    made = record.record([([1, 2], [5, 6]), ([3], [7])])
    assert made == {prompt_key([1, 2]): [5, 6], prompt_key([3]): [7]}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(made))
    assert plugin.load_continuations(str(path)) == made
    with pytest.raises(ValueError, match="two different greedy outputs"):
        record.record([([1], [2]), ([1], [3])])
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"expected \{prompt_key: \[token ids\]\}"):
        plugin.load_continuations(str(path))
    with pytest.raises(ValueError, match="cannot be read as JSON"):
        plugin.load_continuations(str(tmp_path / "missing.json"))


def test_the_continuations_are_read_once_per_file(tmp_path, monkeypatch):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({prompt_key([1]): [2]}))
    reads = []
    read_text = type(path).read_text
    monkeypatch.setattr(type(path), "read_text", lambda self, *a, **k: reads.append(self) or read_text(self, *a, **k))
    for _ in range(3):
        assert plugin.sgl_spec_verify_width("CONTROLLED_ACCEPTANCE", 4, {"continuations": str(path)}) == 4
    assert reads == [path]
    path.write_text(json.dumps({prompt_key([1]): [2, 3]}))
    assert plugin.load_continuations(str(path)) == {prompt_key([1]): [2, 3]}
    assert len(reads) == 2
