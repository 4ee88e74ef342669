"""trtllm_mha TARGET_VERIFY on a Hopper GPU (SM90): the XQA spec-decode call, end to end.

On SM90/SM120, SGLang 0.5.21+ runs trtllm_mha's uniform TARGET_VERIFY
through flashinfer's XQA kernel with ``q_len_per_req = max_seq_len_q`` and a
causal draft-block mask (``_xqa_spec_dec_mask``) that ``__init__`` builds for
``speculative_num_draft_tokens`` (ndt) rows per request. The kernel reads the
mask as ``[batch, q_len_per_req, words]``, so the question is what a plugin
width other than ndt gets.

Two steps, two machines:

``record`` (any machine, the SGLang release under test on PYTHONPATH): build
the real TRTLLMHAAttnBackend through sglang_spec_plugins/testing/trtllm.py with
the platform reporting SM90, lay out TARGET_VERIFY batches at several widths,
run the backend's own ``init_forward_metadata`` and ``forward_extend``, and
record the keyword arguments it passes to
``flashinfer.decode.trtllm_batch_decode_with_kv_cache`` (plus the batch
definition), with and without this package's patches.

``replay`` (an SM90 GPU with flashinfer): call the real flashinfer function
with each recorded call (bf16) and compare its output with attention computed
from the batch definition. Results go to a JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1] / "tests"), str(HERE.parents[1] / "tests" / "on_sglang")]  # the CPU tests' helpers
NDT, BS, PAGE, HEAD_DIM = 4, 3, 16, 128
WIDTHS = (2, 3, 4, 6)  # 4 = ndt; 6: above ndt, below the example SBD maximum (8)


def record(out: Path) -> None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import pytest
    import torch

    from sglang_spec_plugins.testing import trtllm as h
    from sglang_spec_plugins.testing.cpu import install_stand_ins
    from sglang_spec_plugins.engine.probe import installed_version
    from sglang_spec_plugins.patches import PATCHES
    from sglang_spec_plugins.patches.unit import apply_all, revert_all

    install_stand_ins()
    h.HEAD_DIM = HEAD_DIM  # the harness's 16 is below what XQA compiles for
    release = installed_version()
    calls = []

    def recorder(**kwargs):
        call = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in kwargs.items()
                if k not in ("workspace_buffer", "multi_ctas_kv_counter_buffer", "out")}
        call["query"] = call["query"].to(torch.bfloat16)  # what the GPU runs; halves the file
        call["kv_cache"] = tuple(t.to(torch.bfloat16) for t in kwargs["kv_cache"])
        if kwargs.get("mask") is not None:  # a leading slice of the backend's mask: keep what lies beyond it too
            mask = kwargs["mask"]
            call["mask"] = (mask if mask._base is None else mask._base).clone()
            call["mask_requests"] = mask.shape[0]
        calls.append(call)
        query = kwargs["query"]
        return torch.zeros(query.shape, dtype=kwargs.get("out_dtype") or query.dtype)

    records = []
    prefixes = [5, 37, 18][:BS]
    with pytest.MonkeyPatch.context() as mp:
        for patched in (False, True):
            if patched:
                apply_all(PATCHES, release)
            try:
                for width in WIDTHS:
                    with h.backend(mp, NDT, PAGE, BS, sm90=True) as attn:
                        mp.setattr(h._module(h.TRTLLM).flashinfer.decode, "trtllm_batch_decode_with_kv_cache", recorder)
                        batch = h.make_batch(attn, prefixes, width, torch.Generator().manual_seed(width))
                        fb = h.forward_batch(batch, attn)
                        attn.init_forward_metadata(fb)
                        calls.clear()
                        h.forward(attn, fb, batch)
                        assert len(calls) == 1, len(calls)
                        slots = [attn.req_to_token[i, : p + width].clone() for i, p in enumerate(prefixes)]
                        records.append(dict(release=release, patched=patched, width=width, ndt=NDT, prefixes=prefixes,
                                            call=calls[0], q=batch.q.to(torch.bfloat16), slots=slots))
            finally:
                revert_all(PATCHES)
    torch.save(records, out)
    print(f"recorded {len(records)} calls from SGLang {release} into {out}")


def reference(q, k_pages, v_pages, slots, width, scale):
    """Attention from the batch definition: request i's query t sees its prefix
    and new tokens 0..t, read at its KV slots (``slot // page``, ``slot % page``
    in HND pages)."""
    import torch
    from sglang_spec_plugins.testing.attention_reference import attend

    out = torch.empty_like(q)
    page = k_pages.shape[2]
    for i, s in enumerate(slots):
        s = s.long()
        rows = slice(i * width, (i + 1) * width)
        k, v = k_pages[s // page, :, s % page], v_pages[s // page, :, s % page]
        out[rows] = attend(q[rows], k, v, len(s) - width, scale)
    return out


def replay(files, out: Path, widths) -> None:
    import flashinfer
    import torch

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    results = dict(device=torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
                   capability=torch.cuda.get_device_capability() if dev.type == "cuda" else None,
                   torch=torch.__version__, flashinfer=flashinfer.__version__, date=time.strftime("%Y-%m-%d"), runs=[])
    workspace = torch.zeros(128 << 20, dtype=torch.uint8, device=dev)
    for file in files:
        records = [r for w in widths for r in torch.load(file, weights_only=False) if r["width"] == w]
        for r in records:
            call = dict(r["call"])
            bf = torch.bfloat16
            q = r["q"].to(dev, bf)
            kv = tuple(t.to(dev, bf) for t in call.pop("kv_cache"))
            requests = call.pop("mask_requests", None)
            args = {k: (v.to(dev) if torch.is_tensor(v) else v) for k, v in call.items()}
            if requests is not None:
                args["mask"] = args["mask"][:requests]
            args.update(query=args["query"].to(bf), kv_cache=kv, out_dtype=bf, workspace_buffer=workspace)
            entry = dict(release=r["release"], patched=r["patched"], width=r["width"], ndt=r["ndt"],
                         q_len_per_req=call.get("q_len_per_req"),
                         mask_rows_per_request=int(call["mask"].shape[1]) if torch.is_tensor(call.get("mask")) else None)
            try:
                got = flashinfer.decode.trtllm_batch_decode_with_kv_cache(**args).float()
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                want = reference(q.float(), kv[0].float(), kv[1].float(), [s.to(dev) for s in r["slots"]],
                                 r["width"], call["bmm1_scale"])
                err = (got.reshape(want.shape) - want).abs()
                per_req = [float(err[i * r["width"]:(i + 1) * r["width"]].max()) for i in range(len(r["slots"]))]
                entry.update(max_abs_err=float(err.max()), max_abs_err_per_request=per_req, ok=bool(err.max() < 2e-2))
            except Exception as exc:  # a refusal or a crash is a result too
                entry.update(error=f"{type(exc).__name__}: {exc}"[:500], ok=False)
            print(json.dumps(entry), flush=True)
            results["runs"].append(entry)
    out.write_text(json.dumps(results, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    r = sub.add_parser("record")
    r.add_argument("out", type=Path)
    p = sub.add_parser("replay")
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--widths", type=int, nargs="+", default=WIDTHS, help="in this order (each width JIT-compiles a kernel)")
    a = parser.parse_args()
    record(a.out) if a.step == "record" else replay(a.files, a.out, a.widths)


if __name__ == "__main__":
    main()
