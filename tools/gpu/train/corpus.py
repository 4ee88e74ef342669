"""The training text: the Python standard library's own ``.py`` sources, its split, its tokenizer and the prompts.

* :func:`stdlib_files`: every ``.py`` file under ``sysconfig``'s ``stdlib`` path (``site-packages`` and
  ``dist-packages`` left out: not the standard library), in the order of its relative POSIX path, decoded as
  UTF-8 (the few files that are not, test data of the source-encoding tests, left out and counted). A file is
  held out (evaluation and benchmark prompts) when the first 8 hex digits of the SHA-256 of its relative path,
  as an integer, modulo 100 fall below ``held_out_percent``: the split depends on the path alone, not on the
  machine. ``fraction`` keeps, by the same hash (the next 8 digits), that share of the train split (the CPU
  presets; every preset holds out the same files).
  The corpus hash is the SHA-256 over every kept file's relative path and bytes, in order; it differs between
  Python releases (the H200 image has 3.12, this machine 3.11), which the record says.
* :func:`train_tokenizer`: a byte-level BPE (``tokenizers``) trained on the train split, with
  ``<|endoftext|>`` (id 0: between files) and ``<|mask|>`` (id 1: the DFlash draft's mask token) as special
  tokens; :func:`save_tokenizer` writes ``tokenizer.json`` and ``tokenizer_config.json`` as transformers'
  ``AutoTokenizer`` (and so SGLang) loads them.
* :func:`token_stream`: the files' token ids, each followed by ``<|endoftext|>``, as one int32 tensor.
* :func:`prompts`: the benchmark prompts from held-out files, two kinds: ``completion`` (a file's first lines,
  continue them) and ``edit`` (a file's first lines, an instruction-like comment, then the same file's first
  lines again, to be continued: the answer is in the prompt, where prompt lookup shines).
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

ENDOFTEXT, MASK = "<|endoftext|>", "<|mask|>"
SPECIAL_TOKENS = (ENDOFTEXT, MASK)
"""Their ids are their places here: 0 and 1."""
EDIT_MARKER = "\n\n# Revised version of the module above, with the same behaviour:\n\n"
"""What an edit prompt puts between the file and its start given again."""
EXCLUDED_TOP = ("site-packages/", "dist-packages/")


@dataclass(frozen=True)
class Corpus:
    root: str
    python: str
    train: Dict[str, str]
    held_out: Dict[str, str]
    undecodable: List[str]
    sha256: str

    def record(self) -> dict:
        """What the training record says of the corpus."""
        def size(texts):
            return {"files": len(texts), "bytes": sum(len(t.encode()) for t in texts.values())}

        return {"source": "the Python standard library's .py files (sysconfig stdlib path)", "root": self.root,
                "python": self.python, "sha256": self.sha256, "train": size(self.train),
                "held_out": size(self.held_out), "undecodable_left_out": self.undecodable}


def _bucket(path: str, digits: slice) -> int:
    return int(hashlib.sha256(path.encode()).hexdigest()[digits], 16) % 100


def stdlib_files(held_out_percent: int = 5, fraction: float = 1.0, root: Optional[Path] = None) -> Corpus:
    """The corpus of the module doc (``root``: another tree of ``.py`` files, for tests)."""
    import sys

    root = Path(root or sysconfig.get_paths()["stdlib"])
    digest = hashlib.sha256()
    train, held_out, undecodable = {}, {}, []
    for path in sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py") if p.is_file()):
        held = _bucket(path, slice(0, 8)) < held_out_percent
        if path.startswith(EXCLUDED_TOP) or (not held and _bucket(path, slice(8, 16)) >= fraction * 100):
            continue
        data = (root / path).read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            undecodable.append(path)
            continue
        digest.update(path.encode() + b"\0" + data + b"\0")
        (held_out if held else train)[path] = text
    return Corpus(str(root), sys.version.split()[0], train, held_out, undecodable, digest.hexdigest())


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """A byte-level BPE of ``vocab_size`` tokens (the 256 bytes, the merges, :data:`SPECIAL_TOKENS` first)
    trained on ``texts`` in their order; ``tokenizers`` trains it the same on any thread count (checked:
    1 and 2 threads, 4096 tokens on the 3.11 standard library)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(list(texts), trainer)
    for i, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == i, (token, tokenizer.token_to_id(token))
    return tokenizer


def save_tokenizer(tokenizer, folder: Path, max_length: int) -> None:
    """``tokenizer.json`` and the ``tokenizer_config.json`` that makes ``AutoTokenizer`` load it (a fast
    tokenizer, ``<|endoftext|>`` as BOS, EOS and padding, ``<|mask|>`` as the mask token)."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length, "bos_token": ENDOFTEXT,
              "eos_token": ENDOFTEXT, "pad_token": ENDOFTEXT, "mask_token": MASK, "add_bos_token": False,
              "clean_up_tokenization_spaces": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")


def encode(tokenizer, texts: Sequence[str]) -> List[List[int]]:
    return [e.ids for e in tokenizer.encode_batch(list(texts))]


def token_stream(tokenizer, texts: Sequence[str]):
    """The token ids of ``texts``, each followed by ``<|endoftext|>``, in one int32 tensor."""
    import torch

    ids: List[int] = []
    for one in encode(tokenizer, texts):
        ids.extend(one)
        ids.append(SPECIAL_TOKENS.index(ENDOFTEXT))
    return torch.tensor(ids, dtype=torch.int32)


def _lines_up_to(tokenizer, text: str, tokens: int) -> Optional[str]:
    """The longest run of ``text``'s first whole lines of at most ``tokens`` tokens and at least half that
    (None where the text is too short)."""
    lines = text.splitlines(keepends=True)
    kept, count = [], 0
    for line in lines:
        n = len(tokenizer.encode(line).ids)
        if count + n > tokens:
            break
        kept.append(line)
        count += n
    return "".join(kept) if count >= tokens // 2 and len(kept) < len(lines) else None


def prompts(tokenizer, held_out: Dict[str, str], count: int, completion_tokens: int, edit_file_tokens: int,
            edit_restart_tokens: int) -> dict:
    """``count`` prompts of each kind (token ids) from the held-out files in their order, one of each kind per
    file that is long enough; fewer files than ``count`` are used over again from the first (the record says
    how many are distinct). ``completion``: the file's first whole lines, up to ``completion_tokens``;
    ``edit``: its first lines up to ``edit_file_tokens``, :data:`EDIT_MARKER`, then its first lines up to
    ``edit_restart_tokens`` again."""
    found: Dict[str, List[List[int]]] = {"completion": [], "edit": []}
    sources: Dict[str, List[str]] = {"completion": [], "edit": []}
    for path, text in held_out.items():
        head = _lines_up_to(tokenizer, text, completion_tokens)
        if head is not None:
            found["completion"].append(tokenizer.encode(head).ids)
            sources["completion"].append(path)
        body = _lines_up_to(tokenizer, text, edit_file_tokens)
        restart = _lines_up_to(tokenizer, text, edit_restart_tokens)
        if body is not None and restart is not None:
            found["edit"].append(tokenizer.encode(body + EDIT_MARKER + restart).ids)
            sources["edit"].append(path)
    out = {"kinds": {}}
    for kind, ids in found.items():
        if not ids:
            raise ValueError(f"no held-out file is long enough for a {kind} prompt ({len(held_out)} held out)")
        out["kinds"][kind] = [ids[i % len(ids)] for i in range(count)]
        out[f"{kind}_files"] = [sources[kind][i % len(ids)] for i in range(count)]
        out[f"{kind}_distinct"] = min(len(ids), count)
    return out
