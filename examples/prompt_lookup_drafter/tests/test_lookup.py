"""The drafting rule and the greedy acceptance, without SGLang."""

import pytest

from prompt_lookup_drafter.lookup import propose


def test_the_continuation_of_the_latest_earlier_ngram_is_drafted():
    tokens = [1, 2, 3, 9, 1, 2, 3, 7, 8, 1, 2, 3]
    assert propose(tokens, 2) == [7, 8]  # the latest earlier "1 2 3" was followed by 7 8


def test_a_repeating_stretch_is_read_on_past_the_end():
    assert propose([5, 6, 7, 5, 6, 7], 5) == [5, 6, 7, 5, 6]


def test_shorter_ngrams_are_tried_when_longer_ones_never_occurred():
    tokens = [4, 8, 1, 2, 3, 8]
    assert propose(tokens, 3, max_ngram=3, min_ngram=1) == [1, 2, 3]  # only "8" occurred before
    assert propose(tokens, 3, max_ngram=3, min_ngram=2) == [8, 8, 8]  # no 2-gram match: padding


def test_no_match_pads_with_the_last_token_and_edge_cases_are_empty():
    assert propose([1, 2, 3], 4) == [3, 3, 3, 3]
    assert propose([1, 2, 3], 0) == [] and propose([], 3) == []
    assert propose([7], 2) == [7, 7]


@pytest.mark.parametrize("count", [1, 3, 15])
def test_always_exactly_count_tokens(count):
    for tokens in ([1], [1, 1], [1, 2, 1, 2, 1], list(range(40)) + [3, 4]):
        assert len(propose(tokens, count)) == count
