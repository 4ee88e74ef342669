"""The plots of benchmarks/README.md, drawn from the committed results with matplotlib (the ``bench`` extra).

    python3 benchmarks/plots.py            # draw every plot of PLOTS into benchmarks/plots/
    python3 benchmarks/plots.py --check    # exit 1 naming each plot drawn from other inputs (no matplotlib needed)

Each PNG carries a tEXt chunk, :data:`KEY`, holding the SHA-256 of exactly what it was drawn from: the result
files :data:`PLOTS` names (the runs ``landing.CURRENT`` reports) and this script. ``stale`` recomputes it with the standard library alone (CI has no
matplotlib; ``tests/test_benchmark_tables.py`` runs it), so a result file or this script changed after the plot
was drawn fails the check. The result files are read here directly, not through ``e2e_speculative.py``, so that
an edit of that script's other code does not call for new plots.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "plots"
SCRIPT = "benchmarks/plots.py"
KEY = "sglang-spec-plugins inputs"
"""The tEXt keyword whose text is ``{"sha256": ..., "inputs": [...]}``."""

sys.path.insert(0, str(ROOT / "benchmarks"))
import e2e_speculative as e2e  # noqa: E402
from landing import CURRENT  # noqa: E402 - which run answers each question: the landing page's

ASLEEP: List[str] = CURRENT["acceptance"][16]
"""The controlled-acceptance run the landing page reports, first file first."""
DFLASH: List[str] = [CURRENT["dflash"][0][0]]
DFLASH_OVERLAP: str = CURRENT["dflash_overlap"]
VERIFY: List[str] = [CURRENT["verify_step"]]

ENGINES = [("plain", "plain decoding (overlap on)"), ("plain_sync", "plain decoding, overlap off"),
           ("static2_ndt8", "static width 2"), ("static4_ndt8", "static width 4"), ("static8_ndt8", "static width 8"),
           ("static16_ndt16", "static width 16"), ("by_batch_ndt16", "widths by batch size"),
           ("controller_ndt16", "acceptance controller")]
"""The controlled-acceptance engines drawn, ndt 16 (static widths below 16 ran at ndt 8: the same verify)."""
STYLE = {"plain": ("black", "-", "o"), "plain_sync": ("black", "--", "o"), "static2_ndt8": ("tab:blue", "-", "v"),
         "static4_ndt8": ("tab:orange", "-", "^"), "static8_ndt8": ("tab:green", "-", "s"),
         "static16_ndt16": ("tab:red", "-", "D"), "by_batch_ndt16": ("tab:purple", ":", "x"),
         "controller_ndt16": ("tab:brown", "-", "*")}


def _records(paths: List[str], root: Path = ROOT) -> Dict[str, Dict[str, Any]]:
    """``{label: record}`` of the finished records, the first file holding a label winning (``tables --with``)."""
    out: Dict[str, Dict[str, Any]] = {}
    for path in paths:
        for line in (root / path).read_text().splitlines():
            record = json.loads(line) if line.strip() else {}
            if record.get("ok") and record["label"] not in out:
                out[record["label"]] = record
    return out


def _tokens(record: Dict[str, Any]) -> Dict[Tuple[int, Optional[float]], float]:
    """``{(batch, acceptance): tokens/s}`` of a record's cells (the median round's)."""
    return {(c["batch"], c["acceptance"]): c["tokens_per_s"] for c in record["cells"]}


def _at(record: Dict[str, Any], batch: int, acceptance: float) -> Optional[float]:
    """A cell's tokens/s; plain and NGRAM cells (acceptance None) stand for every acceptance."""
    tokens = _tokens(record)
    return tokens.get((batch, acceptance), tokens.get((batch, None)))


def _caption(records: Dict[str, Dict[str, Any]], paths: List[str],
             overlap: str = "the overlap scheduler on for plain decoding only") -> str:
    """Machine, release, date, setting and files of a controlled-acceptance plot, in two lines."""
    first = next(iter(records.values()))
    dates = sorted({r["date"] for r in records.values()})
    rounds = min(len(r.get("rounds") or [r["cells"]]) for r in records.values())
    files = ", ".join(Path(p).name for p in paths)
    return (f"{first['device']}, SGLang {first['sglang']}, {' and '.join(dates)}; Llama-3-8B shape, dummy weights, "
            f"flashinfer, CUDA graphs, median of {rounds} rounds; {overlap}.\nbenchmarks/results/: {files}")


def tokens_by_batch(plt) -> Any:
    records = _records(ASLEEP)
    acceptances = sorted({c["acceptance"] for c in records["controller_ndt16"]["cells"]})
    fig, axes = plt.subplots(1, len(acceptances), figsize=(15, 5.2), sharey=True)
    for ax, a in zip(axes, acceptances):
        for label, name in ENGINES:
            batches = sorted({b for b, _ in _tokens(records[label])})
            color, line, marker = STYLE[label]
            ax.plot(batches, [_at(records[label], b, a) for b in batches], color=color, linestyle=line, marker=marker, label=name)
        ax.set(xscale="log", yscale="log", xlabel="batch size (requests)", title=f"acceptance {a}")
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("output tokens/s (log)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=8, bbox_to_anchor=(0.5, 0.93))
    fig.suptitle("Tokens/s against batch size per engine (CONTROLLED_ACCEPTANCE at ndt 16, acceptance set per panel, "
                 "and plain decoding)")
    fig.text(0.5, 0.01, _caption(records, ASLEEP), ha="center", fontsize=7.5)
    fig.tight_layout(rect=(0, 0.06, 1, 0.88))
    return fig


def speedup_by_acceptance(plt) -> Any:
    from matplotlib.ticker import NullFormatter

    records = _records(ASLEEP)
    plain = records["plain"]
    batches = sorted({b for b, _ in _tokens(plain)})
    acceptances = sorted({c["acceptance"] for c in records["controller_ndt16"]["cells"]})
    fig, axes = plt.subplots(1, len(batches), figsize=(16, 5), sharey=True)
    for ax, b in zip(axes, batches):
        ax.axhline(1.0, color="black", linewidth=1.2, label="plain decoding (overlap on)")
        sync = _at(records["plain_sync"], b, acceptances[0]) / _at(plain, b, acceptances[0])
        ax.axhline(sync, color="black", linestyle="--", linewidth=1, label="plain decoding, overlap off")
        for label, name in ENGINES[2:]:
            color, line, marker = STYLE[label]
            ax.plot(acceptances, [_at(records[label], b, a) / _at(plain, b, a) for a in acceptances], color=color,
                    linestyle=line, marker=marker, label=name)
        ax.set(yscale="log", xlabel="acceptance", title=f"batch {b}")
        ax.set_xticks(acceptances, [str(a) for a in acceptances])
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="major", alpha=0.3)
    ticks = [0.25, 0.5, 1, 2, 4]
    axes[0].set_yticks(ticks, [f"{t:g}x" for t in ticks])
    axes[0].set_ylabel("tokens/s ÷ plain decoding's (log)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=8, bbox_to_anchor=(0.5, 0.93))
    fig.suptitle("Speed-up over plain decoding against acceptance (CONTROLLED_ACCEPTANCE at ndt 16; acceptance: the "
                 "chance each drafted token is kept)")
    fig.text(0.5, 0.01, _caption(records, ASLEEP), ha="center", fontsize=7.5)
    fig.tight_layout(rect=(0, 0.07, 1, 0.88))
    return fig


def verify_width(plt) -> Any:
    grid = json.loads((ROOT / VERIFY[0]).read_text())
    records = _records(ASLEEP)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.4))
    batches = [int(b) for b in grid["grid_step_ms"]]
    colors = {2: "tab:blue", 4: "tab:orange", 8: "tab:green", 16: "tab:red"}
    for w in grid["widths"]:
        left.plot(batches, [grid["grid_step_ms"][str(b)][str(w)] for b in batches], marker="o", color=colors[w],
                  label=f"width {w}")
    left.set(xscale="log", xlabel="batch size (requests)", ylabel="verify step (ms)",
             title="One verify step (32 layers + LM head, trtllm_mha, CUDA graph)")
    left.set_xticks(batches, [str(b) for b in batches])
    left.legend()
    left.grid(True, which="both", alpha=0.3)
    full = records["static16_ndt16"]
    acceptance = 0.7
    e2e_batches = sorted({b for b, _ in _tokens(full)})
    for w, label in ((2, "static2_ndt8"), (4, "static4_ndt8"), (8, "static8_ndt8")):
        right.plot(e2e_batches, [_at(records[label], b, acceptance) / _at(full, b, acceptance) for b in e2e_batches],
                   marker="o", color=colors[w], label=f"width {w}")
    right.axhline(1.0, color=colors[16], label="width 16")
    right.set(xscale="log", xlabel="batch size (requests)", ylabel="tokens/s ÷ width 16's",
              title=f"End to end at acceptance {acceptance}: each static width against width 16")
    right.set_xticks(e2e_batches, [str(b) for b in e2e_batches])
    right.legend()
    right.grid(True, which="both", alpha=0.3)
    fig.suptitle("What a smaller verify width is worth")
    fig.text(0.5, 0.01, f"Left: {grid['device']}, SGLang {grid['release']}, {grid['date']}, context {grid['context']}, no "
                        f"scheduler ({Path(VERIFY[0]).name}).\nRight: "
                        f"{_caption(records, ASLEEP, 'every static engine with the overlap scheduler off').split(chr(10))[0]}",
             ha="center", fontsize=7.5)
    fig.tight_layout(rect=(0, 0.07, 1, 0.96))
    return fig


def dflash_by_batch(plt) -> Any:
    records = _records(DFLASH)
    native, block = records["dflash_native_ndt16"], records["dflash_block_ndt16"]
    batches = sorted(b for b, _ in _tokens(native))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    for record, name, (color, line, marker) in (
            (records["plain"], "plain decoding (overlap on)", ("black", "-", "o")),
            (native, "SGLang's DFLASH (overlap off)", ("tab:blue", "-", "s")),
            (block, "DFLASH_BLOCK plugin, W = B = 16 (overlap off)", ("tab:orange", "--", "^"))):
        tokens = _tokens(record)
        left.plot(batches, [tokens[(b, None)] for b in batches], color=color, linestyle=line, marker=marker, label=name)
    left.set(xscale="log", yscale="log", xlabel="batch size (requests)", ylabel="output tokens/s (log)",
             title="Tokens/s against batch size")
    left.set_xticks(batches, [str(b) for b in batches])
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    overlap = _records([DFLASH_OVERLAP])  # the first group holding both: the two timed in the same rounds
    device = overlap["dflash_native_ovl_ndt16"]["device"]
    for ratios, name, (color, marker) in (
            (e2e.round_ratios([block, native], block["label"], native["label"]), f"both overlap off, {native['device']}", ("tab:orange", "^")),
            (e2e.round_ratios(list(overlap.values()), "dflash_block_ovl_ndt16", "dflash_native_ovl_ndt16"),
             f"both overlap on, {device}", ("tab:green", "D"))):
        medians = [sorted(ratios[b])[(len(ratios[b]) - 1) // 2] for b in batches]
        low = [m - min(ratios[b]) for m, b in zip(medians, batches)]
        high = [max(ratios[b]) - m for m, b in zip(medians, batches)]
        right.errorbar(batches, medians, yerr=[low, high], color=color, marker=marker, capsize=4,
                       label=f"{name}: median and range of {len(ratios[batches[0]])} rounds")
    right.axhline(1.0, color="tab:blue", label="SGLang's DFLASH")
    right.axhline(0.97, color="gray", linestyle=":", label="the bar (0.97)")
    right.set(xscale="log", xlabel="batch size (requests)", ylabel="tokens/s ÷ SGLang's DFLASH", ylim=(0.88, 1.03),
              title="DFLASH_BLOCK ÷ SGLang's DFLASH, round by round")
    right.set_xticks(batches, [str(b) for b in batches])
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=8, loc="lower right")
    fig.suptitle("DFLASH_BLOCK (this package's example plugin) against SGLang's native DFLASH")
    fig.text(0.5, 0.01, f"{native['device']}, SGLang {native['sglang']}, {native['date']}; Llama-3-8B shape and a two-layer "
                        f"DFlash-layout draft, dummy weights (1 token committed a verify step: the machinery, not a "
                        f"speed-up), blocks of 16,\nflashinfer, CUDA graphs, engines resident together, median of "
                        f"{len(native['rounds'])} rounds. benchmarks/results/{Path(DFLASH[0]).name}\nOverlap on: the same "
                        f"shape on an {device}, {overlap['dflash_native_ovl_ndt16']['date']}, each group with a plain_sync "
                        f"control; benchmarks/results/{Path(DFLASH_OVERLAP).name}", ha="center", fontsize=7.5)
    fig.tight_layout(rect=(0, 0.09, 1, 0.95))
    return fig


PLOTS: Dict[str, Tuple[Callable[[Any], Any], List[str]]] = {
    "tokens_by_batch.png": (tokens_by_batch, ASLEEP),
    "speedup_by_acceptance.png": (speedup_by_acceptance, ASLEEP),
    "verify_width.png": (verify_width, VERIFY + ASLEEP),
    "dflash_by_batch.png": (dflash_by_batch, DFLASH + [DFLASH_OVERLAP]),
}
"""Each plot (a file of benchmarks/plots/), the function drawing it and the result files it reads."""


def inputs(name: str) -> List[str]:
    """What plot ``name`` is drawn from: its result files and this script."""
    return sorted({*PLOTS[name][1], SCRIPT})


def digest(paths: List[str], root: Path = ROOT) -> str:
    """SHA-256 over each file's path and bytes, in the order given."""
    h = hashlib.sha256()
    for path in paths:
        data = (root / path).read_bytes()
        h.update(f"{path}\0{len(data)}\0".encode() + data)
    return h.hexdigest()


def png_text(path: Path) -> Dict[str, str]:
    """The tEXt chunks of a PNG file, ``{keyword: text}`` (the standard library's reading: struct, zlib)."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG file")
    found, at = {}, 8
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if struct.unpack(">I", data[at + 8 + length:at + 12 + length])[0] != zlib.crc32(kind + body):
            raise ValueError(f"{path}: chunk {kind!r} fails its CRC")
        if kind == b"tEXt":
            keyword, _, text = body.partition(b"\0")
            found[keyword.decode("latin-1")] = text.decode("latin-1")
        at += 12 + length
    return found


def stale(root: Path = ROOT) -> List[str]:
    """The plots missing under ``root`` or drawn from other inputs than the files under ``root`` now hold."""
    out = []
    for name in PLOTS:
        png = root / "benchmarks" / "plots" / name
        stamp = json.loads(png_text(png).get(KEY, "{}")) if png.exists() else {}
        if stamp != {"sha256": digest(inputs(name), root), "inputs": inputs(name)}:
            out.append(name)
    return out


def draw() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT.mkdir(exist_ok=True)
    for name, (function, _) in PLOTS.items():
        fig = function(plt)
        stamp = json.dumps({"sha256": digest(inputs(name)), "inputs": inputs(name)})
        fig.savefig(OUT / name, dpi=110, metadata={KEY: stamp, "Software": None})
        plt.close(fig)
        print(f"wrote {(OUT / name).relative_to(ROOT)}")


def main(argv: List[str]) -> int:
    if argv == ["--check"]:
        found = stale()
        for name in found:
            print(f"benchmarks/plots/{name} is stale: run python3 benchmarks/plots.py (pip install '.[bench]')")
        return 1 if found else 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    draw()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
