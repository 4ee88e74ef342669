"""For each request where a speculative engine's greedy output left the plain one's: how close was it?

usage: python3 margins.py DIVERGENCES.json BACKEND [--prefix LABEL_PREFIX] [--dtype float16]
       (on the H200, under run.sh's environment)

Starts the plain engine of ``BACKEND`` (CUDA graphs on, as ``engine_check.py`` starts it, in
``--dtype``) and, for every divergence of the engines whose label starts with ``--prefix``
(default: that backend's bf16 engines of ``run.sh``) (``compare.py --divergences``), prefills the prompt and
the common prefix and asks for the two most likely next tokens. A divergence that is a near-tie
(the two tokens the engines chose are the plain engine's top two, a small log-probability apart)
comes from two kernels summing in another order (a decode step and a verify step), not from the
drafter; a divergence to any other token, or by a wide margin, would be a bug. One JSON line per
divergence goes to $OUT/margins.jsonl.
"""

import argparse
import json
import os
import sys

TOP = 5
"""How many of the plain engine's most likely tokens to ask for: a divergence at a tie of three or more tokens
names a token the first two do not hold (24 of the 340 on the random tiny target, 2026-12-03)."""
MARGIN_REQUEST = dict(sampling_params={"temperature": 0, "max_new_tokens": 1}, return_logprob=True, top_logprobs_num=TOP,
                      logprob_start_len=-1)
"""What to ask the plain engine, with the prompt and the common prefix as ``input_ids``."""


def margin(out, speculative, plain):
    """The plain engine's two most likely next tokens after the common prefix (``out``: its answer to
    :data:`MARGIN_REQUEST`), their log-probabilities and margin, whether the tokens the two engines
    chose (``speculative``, ``plain``) are those two, and how far below the most likely token each chosen
    one is (``behind``: log-probability; None where it is not among the :data:`TOP` asked for)."""
    top = out["meta_info"]["output_top_logprobs"][0]
    (lp1, t1, _), (lp2, t2, _) = top[:2]
    seen = {token: lp1 - lp for lp, token, _ in top}
    return {"top2": [t1, t2], "logprobs": [lp1, lp2], "margin": lp1 - lp2, "chosen_are_top2": {speculative, plain} == {t1, t2},
            "behind": {"speculative": seen.get(speculative), "plain": seen.get(plain)}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("divergences")
    parser.add_argument("backend")
    parser.add_argument("--prefix")
    parser.add_argument("--dtype", default="auto")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import sglang
    from engine_check import arguments, engine_kwargs

    prefix = args.prefix or {"flashinfer": "fi_", "triton": "tri_"}[args.backend]  # engine labels in run.sh
    found = [d for d in json.load(open(args.divergences)) if d["label"].startswith(prefix)]
    # the plain engine as engine_check.py starts it (the target: $ENGINE_MODEL)
    options = arguments().parse_args(["margins", "--backend", args.backend, "--batches", "32", "--dtype", args.dtype])
    engine = sglang.Engine(**engine_kwargs(options))
    outputs = engine.generate(input_ids=[d["input_ids"] for d in found], **MARGIN_REQUEST)
    with open(os.path.join(os.environ.get("OUT", "."), "margins.jsonl"), "a") as f:
        for d, out in zip(found, outputs):
            f.write(json.dumps({k: d[k] for k in ("label", "batch", "prompts", "request", "position", "speculative", "plain")}
                               | margin(out, d["speculative"], d["plain"])) + "\n")
    engine.shutdown()
    print(f"{len(found)} divergences of {args.backend} measured", flush=True)
    os._exit(0)
