"""testing.soak: the mixed request set and the verdict the soak drivers share (no SGLang)."""

import json
from collections import Counter

import pytest

from sglang_spec_plugins.testing.soak import ABORT, GREEDY, JSON, JSON_SCHEMA, LOGPROB, SAMPLED, mixed_requests, verdict

REFUSAL = "serves greedy requests only"


def test_the_set_is_mixed_and_the_same_from_the_same_seed():
    requests = mixed_requests(2000, seed=3)
    assert requests == mixed_requests(2000, seed=3) and requests != mixed_requests(2000, seed=4)
    kinds = Counter(r.kind for r in requests)
    assert 70 <= kinds[SAMPLED] + kinds[LOGPROB] <= 130 and 70 <= kinds[ABORT] <= 130  # about 5% each
    prompts = sorted(len(r.input_ids) for r in requests)
    outputs = sorted(r.max_new_tokens for r in requests if r.kind == GREEDY)
    assert prompts[0] == 8 and prompts[-1] > 900 and prompts[len(prompts) // 2] < 200  # short ones often, long ones too
    assert outputs[0] == 1 and outputs[-1] > 230
    assert all(r.abort_after >= 1 and r.max_new_tokens >= 4 * r.abort_after for r in requests if r.kind == ABORT)
    assert len({r.rid for r in requests}) == 2000
    rids = sorted(r.rid for r in requests)  # SGLang's scheduler aborts every request whose rid starts with the one named
    assert not any(b.startswith(a) for a, b in zip(rids, rids[1:]))
    assert [r.sampling_params()["temperature"] for r in requests if r.kind == SAMPLED] == [0.8] * kinds[SAMPLED]
    assert all(r.return_logprob == (r.kind == LOGPROB) and r.stream == (r.kind == ABORT) for r in requests)
    assert kinds[JSON] == 0


def test_a_mix_sets_each_kind_s_share_and_a_json_request_carries_the_schema():
    mix = {SAMPLED: 0.3, LOGPROB: 0.1, JSON: 0.1, ABORT: 0.05}
    requests = mixed_requests(2000, seed=3, mix=mix)
    kinds = Counter(r.kind for r in requests)
    for kind, share in mix.items():  # binomial: 4.5 standard deviations at 2,000 requests hold with p < 1e-5
        assert abs(kinds[kind] - 2000 * share) <= 4.5 * (2000 * share * (1 - share)) ** 0.5, (kind, kinds)
    json_requests = [r for r in requests if r.kind == JSON]
    assert all(json.loads(r.sampling_params()["json_schema"]) == JSON_SCHEMA and r.sampling_params()["temperature"] == 0
               and r.max_new_tokens >= 64 and not r.return_logprob for r in json_requests)
    with pytest.raises(ValueError, match="add up to at most 1"):
        mixed_requests(10, mix={SAMPLED: 0.7, JSON: 0.4})
    with pytest.raises(ValueError, match="shares in"):
        mixed_requests(10, mix={"beam": 0.1})


def test_a_json_request_must_close_an_object_of_the_schema_or_run_to_its_length():
    requests = [r for r in mixed_requests(200, seed=2, vocab=256, output_lengths=(2, 8), mix={JSON: 0.5})
                if r.kind == JSON][:4]
    good = '{"id": 3, "ok": true}'
    outcomes = {requests[0].rid: _outcome([7] * 9, "stop", text=good),
                requests[1].rid: _outcome([7] * requests[1].max_new_tokens, "length", text='{"id": 3'),
                requests[2].rid: _outcome([7] * 9, "stop", text='{"id": "3", "ok": true}'),
                requests[3].rid: _outcome([7] * 9, "stop")}
    found = verdict(requests, outcomes)
    assert found["json_valid"] == 1 and found["json_unclosed"] == 1 and found["served_beyond_greedy"] == 4
    assert [p.split(": ", 1)[1] for p in found["problems"]] == [
        f"its object '{{\"id\": \"3\", \"ok\": true}}' is not one of the schema {json.dumps(JSON_SCHEMA)}",
        "no text came back to check against the schema"]
    plain = {r.rid: [7] * len(outcomes[r.rid]["output_ids"]) for r in requests}
    plain[requests[0].rid] = [8] * 9
    assert [d["rid"] for d in verdict(requests, outcomes, plain)["divergent"]] == [requests[0].rid]
    # plain decoding under SGLang's overlap scheduler decodes one token past a closed object's stop token
    plain[requests[0].rid] = [7] * 9 + [5]
    found = verdict(requests, outcomes, plain)
    assert found["divergent"] == [] and found["plain_past_the_stop"] == 1 and found["identical"] == 2
    plain[requests[0].rid] = [7] * 9 + [5, 5]  # more than that one token is a divergence
    assert [d["rid"] for d in verdict(requests, outcomes, plain)["divergent"]] == [requests[0].rid]


def _outcome(tokens, finish="length", message=None, **extra):
    return {"output_ids": tokens, "finish": {"type": finish, **({"message": message} if message else {})}, **extra}


def test_the_verdict_names_what_went_wrong_and_lists_divergences():
    requests = mixed_requests(40, seed=1, vocab=256, prompt_lengths=(4, 16), output_lengths=(2, 8), mix={SAMPLED: 0.1,
                              LOGPROB: 0.1, ABORT: 0.2})
    by_kind = {kind: [r for r in requests if r.kind == kind] for kind in (GREEDY, SAMPLED, LOGPROB, ABORT)}
    assert all(by_kind.values())
    outcomes = {r.rid: _outcome([7] * r.max_new_tokens) for r in by_kind[GREEDY] + by_kind[SAMPLED] + by_kind[LOGPROB]}
    outcomes.update({r.rid: _outcome([7] * r.abort_after, "abort") for r in by_kind[ABORT]})
    plain = {r.rid: [7] * r.max_new_tokens for r in by_kind[GREEDY] + by_kind[LOGPROB]}
    clean = verdict(requests, outcomes, plain)
    assert clean["problems"] == [] and clean["identical"] == clean["compared"] == len(by_kind[GREEDY] + by_kind[LOGPROB])
    assert clean["finished"] == len(by_kind[GREEDY]) and clean["served_beyond_greedy"] == len(by_kind[SAMPLED] + by_kind[LOGPROB])
    assert clean["aborted"] == len(by_kind[ABORT]) and clean["refused"] == 0

    first, second = by_kind[GREEDY][:2]
    bad = dict(outcomes)
    del bad[first.rid]
    bad[second.rid] = _outcome([7] * (second.max_new_tokens - 1))
    bad[by_kind[SAMPLED][0].rid] = _outcome([7], "abort", f"X {REFUSAL}")  # refused: the bases serve it
    bad[by_kind[LOGPROB][0].rid] = _outcome([7] * (by_kind[LOGPROB][0].max_new_tokens + 1))
    bad[by_kind[ABORT][0].rid] = {"output_ids": [], "finish": None, "error": "connection reset"}
    found = verdict(requests, bad, plain)
    assert {p.split(":")[0] for p in found["problems"]} == {
        f"{first.rid} ({GREEDY})", f"{second.rid} ({GREEDY})", f"{by_kind[SAMPLED][0].rid} ({SAMPLED})",
        f"{by_kind[LOGPROB][0].rid} ({LOGPROB})", f"{by_kind[ABORT][0].rid} (abort after {by_kind[ABORT][0].abort_after})"}

    third = by_kind[GREEDY][2]
    plain[third.rid] = [7, 8] + [7] * (third.max_new_tokens - 2)
    assert verdict(requests, outcomes, plain)["divergent"] == [{"rid": third.rid, "at": 1, "token": 7, "plain_token": 8}]
    disconnected = {**outcomes, by_kind[ABORT][0].rid: {"output_ids": [7], "finish": None, "disconnected": True}}
    assert verdict(requests, disconnected)["aborted"] == len(by_kind[ABORT])


def test_a_greedy_only_drafter_must_refuse_sampled_and_logprob_requests_with_its_message():
    requests = mixed_requests(40, seed=1, vocab=256, prompt_lengths=(4, 16), output_lengths=(2, 8), mix={SAMPLED: 0.1,
                              LOGPROB: 0.1, ABORT: 0.2})
    beyond = [r for r in requests if r.kind in (SAMPLED, LOGPROB)]
    outcomes = {r.rid: _outcome([7] * r.max_new_tokens) for r in requests if r.kind == GREEDY}
    outcomes.update({r.rid: _outcome([7] * r.abort_after, "abort") for r in requests if r.kind == ABORT})
    outcomes.update({r.rid: _outcome([7], "abort", f"X {REFUSAL}") for r in beyond})
    clean = verdict(requests, outcomes, refusal=REFUSAL)
    assert clean["problems"] == [] and clean["refused"] == clean["refused_with_message"] == len(beyond)
    outcomes[beyond[0].rid] = _outcome([7] * beyond[0].max_new_tokens)
    outcomes[beyond[1].rid] = _outcome([7], "abort", "another message")
    assert [p.split(": ", 1)[1] for p in verdict(requests, outcomes, refusal=REFUSAL)["problems"]] == [
        "served ({'type': 'length'}), not refused", "refused without the plugin's message: 'another message'"]
