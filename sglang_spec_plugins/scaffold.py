"""``sglang-spec-plugins new NAME [--draft-model]``: write a drafter package that
installs with pip and passes its own tests (the conformance kit) as generated.

The package: ``pyproject.toml`` (the entry point in the group
``sglang_spec_plugins``, the kit turned on for pytest), ``<module>/plugin.py``
(the hooks), ``<module>/worker.py`` (the worker SGLang instantiates),
``tests/test_plugin.py`` and a README saying what the author supplies. The
worker is built on ``chain_worker_base()`` with a small real drafter (what
followed the latest earlier occurrence of the last token), so the package
serves every request exactly as plain decoding does (greedy token for token,
sampled in distribution) as generated. With
``--draft-model`` the drafter has a draft model of its own (a DFlash-layout
checkpoint from ``--speculative-draft-model-path``): the plugin declares a
``DraftModel``, its draft runner drafts a block and may verify, the target
verifies the block's first ``verify_width`` tokens, and the worker is built
on ``draft_block_worker_base()`` with SGLang's DFLASH's greedy drafts, so it
serves exactly as plain decoding does as generated. Both declare
``supports_overlap=True``: the bases run under SGLang's overlap scheduler.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Dict

from . import __version__
from .config import RESERVED_ALGORITHM_NAMES

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "{algorithm}: a speculative-decoding drafter for SGLang (a sglang-spec-plugins plugin)"
requires-python = ">=3.10"
dependencies = ["sglang-spec-plugins>={framework}"]

[project.optional-dependencies]
test = ["pytest>=8"]

[project.entry-points.sglang_spec_plugins]
{module} = "{module}.plugin"

[tool.setuptools]
packages = ["{module}"]

[tool.pytest.ini_options]
addopts = "-p sglang_spec_plugins.testing"
testpaths = ["tests"]
# the plugin(s) the sglang-spec-plugins conformance kit checks (entry-point names)
sglang_spec_plugins = ["{module}"]
'''

PLUGIN = '''\
"""{algorithm}: the hooks sglang-spec-plugins asks (see sglang_spec_plugins/hookspecs.py).

This module must import without SGLang (``sglang-spec-plugins list`` and
``check`` load it anywhere): anything that needs SGLang goes in worker.py,
imported by the worker factory.
"""

from sglang_spec_plugins import AlgorithmSpec, hookimpl

ALGORITHM = "{algorithm}"
"""The --speculative-algorithm name; hooks receive it upper case, exactly like this."""


def _worker_factory(server_args):
    from .worker import Worker  # imports SGLang: only ever called inside SGLang's processes

    return Worker


def _validate(server_args):
    """Run while SGLang resolves its arguments, before any weight loads: the chain worker's release
    check (SGLang 0.5.14+). Raise ValueError here for settings or arguments the drafter refuses."""
    from sglang_spec_plugins.worker import require_chain_release  # the worker API: imported only when it runs

    require_chain_release(ALGORITHM)


@hookimpl
def sgl_spec_algorithms():
    # supports_overlap=True: the chain worker base runs under SGLang's overlap scheduler (its default).
    # has_draft_kv=False: no draft model, so no draft KV to size or transfer.
    return [AlgorithmSpec(name=ALGORITHM, worker_factory=_worker_factory, supports_overlap=True,
                          validate_server_args=_validate, capabilities={{"has_draft_kv": False}})]


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, is_draft_worker, settings):
    """Tokens each request verifies in TARGET_VERIFY (pure: same arguments, same answer)."""
    if algorithm != ALGORITHM:
        return None  # another plugin's algorithm
    return settings.get("verify_width", num_draft_tokens)


@hookimpl
def sgl_spec_widths_by_batch_size(algorithm, num_draft_tokens, is_draft_worker, settings):
    """Widths by batch size, {{min_batch_size: width}}, e.g. {{1: 16, 8: 8, 64: 4}}: batches of 1-7
    requests verify 16 tokens each, 8-63 verify 8, 64 and more 4 (every width from 1 to the maximum).
    None: one width at every batch size (sgl_spec_verify_width). SGLang captures each CUDA graph at
    its batch size's width; the worker takes each step's width from StepWidths (worker.py). An
    operator can set them in plugins.toml instead (used instead of this hook):
        [algorithms.{algorithm}]
        widths_by_batch_size = {{1 = 16, 8 = 8, 64 = 4}}"""
    if algorithm != ALGORITHM:
        return None
    return None  # one width at every batch size


@hookimpl
def sgl_spec_max_verify_width(algorithm, num_draft_tokens, settings):
    """The largest width sgl_spec_verify_width may answer (sizes KV and CUDA graphs)."""
    if algorithm != ALGORITHM:
        return None
    return max(num_draft_tokens, settings.get("verify_width", num_draft_tokens))


@hookimpl
def sgl_spec_draft_may_verify(algorithm, settings):
    """Whether the drafter's own model runner runs TARGET_VERIFY (block drafters do)."""
    if algorithm != ALGORITHM:
        return None
    return False
'''

DRAFT_MODEL_PLUGIN = '''\
"""{algorithm}: the hooks sglang-spec-plugins asks (see sglang_spec_plugins/hookspecs.py), for a
drafter with its own draft model: a checkpoint in SGLang's DFlash layout, loaded from
--speculative-draft-model-path (checked at start-up against the target and the block).

Its draft runner drafts a block of --speculative-num-draft-tokens tokens per request in one
TARGET_VERIFY forward (is_draft_worker=True); the target verifies the block's first
``verify_width`` (plugins.toml; default: the whole block). This module must import without
SGLang: anything that needs SGLang goes in worker.py, imported by the worker factory.
"""

from sglang_spec_plugins import AlgorithmSpec, DraftModel, hookimpl, is_plain_int

ALGORITHM = "{algorithm}"
"""The --speculative-algorithm name; hooks receive it upper case, exactly like this."""


def _worker_factory(server_args):
    from .worker import Worker  # imports SGLang: only ever called inside SGLang's processes

    return Worker


def _validate(server_args):
    """Run while SGLang resolves its arguments, before any weight loads: the block worker's argument
    check (--tp-size 1). Raise ValueError here for settings or arguments the drafter refuses."""
    from sglang_spec_plugins.worker import require_block_args  # the worker API: imported only when it runs

    require_block_args(ALGORITHM, server_args)


@hookimpl
def sgl_spec_algorithms():
    # DraftModel(): the target captures the hidden states of the layers the draft config names,
    # the draft KV pool is counted in the target's KV budget, the draft's CUDA graphs take
    # input_embeds (what SGLang gives only its DFLASH family otherwise). supports_overlap=True: the block
    # worker base runs under SGLang's overlap scheduler (its default).
    return [AlgorithmSpec(name=ALGORITHM, worker_factory=_worker_factory, supports_overlap=True,
                          validate_server_args=_validate, draft_model=DraftModel())]


@hookimpl
def sgl_spec_verify_width(algorithm, num_draft_tokens, is_draft_worker, settings):
    """The draft runner's block (is_draft_worker=True), and the first tokens of it the target verifies."""
    if algorithm != ALGORITHM:
        return None  # another plugin's algorithm
    if is_draft_worker:
        return num_draft_tokens
    width = settings.get("verify_width", num_draft_tokens)
    if not is_plain_int(width) or not 1 <= width <= num_draft_tokens:  # stops the server at load, naming the key
        raise ValueError(f"[algorithms.{{ALGORITHM}}] verify_width = {{width!r}}: it must be an int from 1 to the block "
                         f"the draft model drafts (--speculative-num-draft-tokens, {{num_draft_tokens}})")
    return width


@hookimpl
def sgl_spec_draft_may_verify(algorithm, settings):
    """The draft runner runs TARGET_VERIFY: the block's forward."""
    if algorithm != ALGORITHM:
        return None
    return True
'''

DRAFT_MODEL_WORKER = '''\
"""The worker SGLang instantiates for {algorithm} (this module imports SGLang).

draft_block_worker_base() (sglang_spec_plugins.worker) is the whole decode step of a
DFLASH-style block drafter, on every release 0.5.14+, under SGLang's overlap scheduler or without
it: each decode step the draft model (the
DFlash-layout checkpoint at --speculative-draft-model-path, ``self.draft_runner.model``) runs the
block ``[last token, mask...]`` of ``self.block`` tokens per request in one forward on its own
runner, ``drafts`` turns its hidden states into the block's drafts, the target verifies the first
``self.width`` tokens of ``[last token, drafts...]`` and commits what verification accepts (greedy
requests as plain greedy decoding, sampled ones as plain sampling, penalties, grammars and logprobs
as plain decoding's), and the verified tokens' hidden states become the draft's context KV. Outputs
are plain decoding's whatever the drafts are; with verify_width the whole block and the generated
``drafts``, it drafts token for token as SGLang's own DFLASH. A ``drafts`` that raises or returns
the wrong shape or token ids is logged and the step goes on without it: the server never stops.

What you replace is ``drafts`` (``self.lm_head`` and ``self.embedding`` are the target's), and
optionally ``refusal(req)``. ``self.policy.settings`` is this algorithm's plugins.toml table.
"""

from sglang_spec_plugins.worker import draft_block_worker_base


class Worker(draft_block_worker_base()):
    def drafts(self, batch, hidden):
        """The block's drafts, ``(bs, self.block - 1)`` token ids, from the draft model's hidden states
        at the block's positions after the last token, ``(bs, self.block - 1, hidden_size)``.

        THE DRAFTER: replace this with yours. As generated: the target's LM head over them, greedy
        (what SGLang's DFLASH drafts)."""
        return self.greedy_drafts(hidden)
'''

WORKER = '''\
"""The worker SGLang instantiates for {algorithm} (this module imports SGLang).

chain_worker_base() (sglang_spec_plugins.worker) is the whole decode step of a model-free chain
drafter, on every release 0.5.14+, under SGLang's overlap scheduler or without it: each decode
step it asks ``drafts`` for each request's drafts, runs the target's TARGET_VERIFY forward over
``[last token, drafts...]`` at the step's width, and commits what verification accepts: greedy
requests exactly plain greedy decoding's tokens, sampled ones (temperature, top-k, top-p, min-p)
distributed exactly as plain sampling's, penalties, logit_bias, min_new_tokens and grammars applied
at every position as plain decoding applies them, logprobs returned. Whatever the drafts, the output
is plain decoding's; good drafts commit more tokens per step. A fault of your code (an exception, a
wrong answer) never stops the server: the step goes on without your answer and logs it.

What you replace is ``drafts``. You may also replace ``step_width(batch)`` (the step's width; the
framework's by default) and ``refusal(req)``; ``self.carried(req)`` gives, inside a step, the
target's tokens past what the request committed at its last step (for a drafter that learns from
the target). ``self.policy.settings`` is this algorithm's plugins.toml table; ``self.widths`` its
widths (StepWidths).
"""

from typing import List

from sglang_spec_plugins.worker import chain_worker_base


class Worker(chain_worker_base()):
    def drafts(self, req, tokens: List[int], count: int) -> List[int]:
        """``count`` draft tokens to follow ``tokens`` (the request's prompt and output so far).

        THE DRAFTER: replace this with yours. As generated it drafts what followed the latest earlier
        occurrence of the last token, read on as if the draft were appended (a repeating stretch keeps
        repeating), else the last token repeated."""
        last, known = tokens[-1], len(tokens)
        for start in range(known - 2, -1, -1):
            if tokens[start] == last:
                period = known - 1 - start
                return [tokens[start + 1 + k % period] for k in range(count)]
        return [last] * count
'''

TESTS = '''\
"""The conformance kit (turned on in pyproject.toml) checks the plugin
against sglang-spec-plugins and, where SGLang is installed, against SGLang.
Your own tests of the hooks go here."""

from {module} import plugin


def test_width_follows_the_setting():
    assert plugin.sgl_spec_verify_width(plugin.ALGORITHM, 16, False, {{"verify_width": 8}}) == 8
    assert plugin.sgl_spec_verify_width("OTHER", 16, False, {{}}) is None
'''

README = '''\
# {dist}

The `{algorithm}` speculative-decoding drafter for SGLang, as a
sglang-spec-plugins plugin (install sglang-spec-plugins from its source tree or a wheel built from it:
it has no PyPI release yet)
(entry point `{module}` in the group `sglang_spec_plugins`).

## What you supply

- `{module}/worker.py`: the worker SGLang instantiates, built on `chain_worker_base()`, which drafts,
  verifies and accepts every decode step; outputs are plain decoding's whatever the drafts (greedy token for
  token, sampled in distribution).
  `drafts(req, tokens, count)` is the drafter: as generated, it drafts what followed the latest
  earlier occurrence of the last token. Replace it with yours (and, optionally, `step_width`,
  `refusal`).
- `{module}/plugin.py`: the verify width (`sgl_spec_verify_width`), its maximum, widths by batch
  size, `supports_overlap`, and `validate_server_args` (the chain worker's release check, SGLang 0.5.14+).

## Try it

```bash
pip install -e '.[test]'
pytest                                   # your tests + the sglang-spec-plugins conformance kit
sglang-spec-plugins check -n 16                # what SGLang will be told, with the flags below
python -m sglang.launch_server --model-path ... --speculative-algorithm {algorithm} \\
    --speculative-num-draft-tokens 16
```

The worker runs under SGLang's overlap scheduler (its default) and serves greedy, sampled,
penalised, logprob and grammar requests exactly as plain decoding does.

Widths by batch size (fewer tokens per request as the batch grows), from the plugin's
`sgl_spec_widths_by_batch_size` or, with no code, from the server's plugins.toml:

```toml
[algorithms.{algorithm}]
# widths_by_batch_size = {{1 = 16, 8 = 8, 64 = 4}}   # 1-7 requests: 16 tokens each, 8-63: 8, 64 and more: 4
```
'''


DRAFT_MODEL_TESTS = '''\
"""The conformance kit (turned on in pyproject.toml) checks the plugin
against sglang-spec-plugins and, where SGLang is installed, against SGLang.
Your own tests of the hooks go here."""

import pytest

from {module} import plugin


def test_the_draft_runner_drafts_the_block_and_the_target_verifies_part_of_it():
    assert plugin.sgl_spec_verify_width(plugin.ALGORITHM, 16, True, {{"verify_width": 4}}) == 16
    assert plugin.sgl_spec_verify_width(plugin.ALGORITHM, 16, False, {{"verify_width": 4}}) == 4
    assert plugin.sgl_spec_verify_width("OTHER", 16, False, {{}}) is None


def test_a_verify_width_beyond_the_block_is_refused_naming_the_key():
    for width in (17, 0, 4.0):
        with pytest.raises(ValueError, match="verify_width"):
            plugin.sgl_spec_verify_width(plugin.ALGORITHM, 16, False, {{"verify_width": width}})
'''

DRAFT_MODEL_README = '''\
# {dist}

The `{algorithm}` speculative-decoding drafter for SGLang, with a draft model of its own, as a
sglang-spec-plugins plugin (install sglang-spec-plugins from its source tree or a wheel built from it:
it has no PyPI release yet) (entry point `{module}` in the group `sglang_spec_plugins`).

## What you supply

- `{module}/worker.py`: the worker SGLang instantiates, built on `draft_block_worker_base()`, which
  drafts a block with the draft model, verifies part of it with the target and accepts, every decode
  step; outputs are plain decoding's whatever the drafts (greedy token for token, sampled in distribution).
  `drafts(batch, hidden)` turns the
  draft model's hidden states into the block's drafts: as generated, the target's LM head, greedy
  (SGLang's DFLASH's rule). Replace it with yours.
- `{module}/plugin.py`: the widths (the draft runner's block, the target's verify width), the
  `DraftModel` declaration, `supports_overlap`, and `validate_server_args` (`--tp-size 1`).

## Try it

```bash
pip install -e '.[test]'
pytest                                   # your tests + the sglang-spec-plugins conformance kit
sglang-spec-plugins check -n 16 --model-path TARGET --speculative-draft-model-path DRAFT
python -m sglang.launch_server --model-path TARGET --speculative-algorithm {algorithm} \\
    --speculative-draft-model-path DRAFT --speculative-num-draft-tokens 16
```

`DRAFT` is a checkpoint in SGLang's DFlash layout (`"architectures": ["DFlashDraftModel"]`, the
target's `hidden_size`, `dflash_config` with `block_size` 16, `target_layer_ids` and
`mask_token_id`); a folder holding only its `config.json` serves with random weights under
`--speculative-draft-load-format dummy`. The target verifies the block's first `verify_width`
tokens:

```toml
[algorithms.{algorithm}]
# verify_width = 4
```
'''


def names(name: str) -> Dict[str, str]:
    """``dist`` (pip name), ``module`` (import and entry-point name) and
    ``algorithm`` (the upper-case --speculative-algorithm) for ``name``."""
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name):
        raise ValueError(f"{name!r} is not a valid package name: start with a letter; letters, digits, - and _ only")
    module = name.replace("-", "_").lower()
    if keyword.iskeyword(module) or module in sys.stdlib_module_names:
        raise ValueError(f"{name!r} would make a module named {module!r}, which Python already uses; choose another name")
    if module.upper() in RESERVED_ALGORITHM_NAMES:
        raise ValueError(f"{name!r} would make the algorithm {module.upper()!r}, a built-in SGLang algorithm name; choose another name")
    dist = module.replace("_", "-")
    taken = _taken(dist, module)
    if taken:
        raise ValueError(f"{name!r} would make the distribution {dist!r} and the module {module!r}, which {taken}: "
                         "`pip install -e .` would replace it; choose another name")
    return {"dist": dist, "module": module, "algorithm": module.upper()}


FRAMEWORK_DISTRIBUTIONS = frozenset({
    "sglang", "sglang-spec-plugins", "sglang-router", "sglang-kernel", "sgl-kernel", "torch", "triton",
    "flashinfer-python", "pluggy", "packaging", "tomli", "pytest",
})
"""What a drafter package runs beside: never a drafter's name, installed here or not."""


def _taken(dist: str, module: str) -> str:
    """Why ``dist``/``module`` is not free (a framework distribution, an
    installed distribution, an importable module), or ""."""
    if dist in FRAMEWORK_DISTRIBUTIONS:
        return "SGLang and sglang-spec-plugins run with"
    installed = {re.sub(r"[-_.]+", "-", d.metadata["Name"] or "").lower(): d.metadata["Name"] for d in metadata.distributions()}
    if dist in installed:
        return f"is already installed here ({installed[dist]})"
    if importlib.util.find_spec(module) is not None:
        return "is already importable here"
    return ""


def files(name: str, draft_model: bool = False) -> Dict[str, str]:
    """Relative path -> text of every file of the package ``name`` (``draft_model``:
    a drafter with its own draft model)."""
    n = dict(names(name), framework=__version__)
    module = n["module"]
    return {
        "pyproject.toml": PYPROJECT.format(**n),
        "README.md": (DRAFT_MODEL_README if draft_model else README).format(**n),
        f"{module}/__init__.py": f'"""The {n["algorithm"]} drafter plugin for sglang-spec-plugins."""\n',
        f"{module}/plugin.py": (DRAFT_MODEL_PLUGIN if draft_model else PLUGIN).format(**n),
        f"{module}/worker.py": (DRAFT_MODEL_WORKER if draft_model else WORKER).format(**n),
        "tests/test_plugin.py": (DRAFT_MODEL_TESTS if draft_model else TESTS).format(**n),
    }


def write(name: str, parent: Path, draft_model: bool = False) -> Path:
    """Write the package into ``parent/<name>`` (which must not exist); return it."""
    target = parent / name
    if target.exists():
        raise FileExistsError(f"{target} already exists; choose another name or directory")
    for rel, text in files(name, draft_model).items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return target


def command(args) -> int:
    """``sglang-spec-plugins new NAME [--dir DIR]``."""
    try:
        n = names(args.name)  # before writing: once written into the working directory, the module is importable
        target = write(args.name, args.dir, getattr(args, "draft_model", False))
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: cannot write the package into {args.dir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote {target} (distribution {n['dist']}, plugin {n['module']}, algorithm {n['algorithm']})")
    print(f"next: cd {target} && pip install -e '.[test]' && pytest")
    return 0
