"""The start-up check of a plugin whose worker has its own draft model.

Part of :func:`~.startup_check.faults` for an algorithm whose ``AlgorithmSpec``
declares a :class:`~sglang_spec_plugins.draft_model.DraftModel`, so it runs
while SGLang resolves its arguments, before any weight loads (and in
``check``). It refuses, one line each:

* a release before 0.5.14 (no V2 speculative schema to drive the worker on);
* a missing ``--speculative-draft-model-path``, a draft config that cannot be
  read, an architecture that is not one of the release's DFlash draft models,
  a draft ``hidden_size`` other than the target's, a ``block_size`` other than
  the draft runner's width (the block; SGLang's DFLASH makes it
  ``--speculative-num-draft-tokens``), a missing ``mask_token_id`` or one
  outside the target's vocabulary, ``target_layer_ids`` outside the target's
  layers (each naming the file and key);
* every DFLASH-only site of the release (:mod:`..engine.dflash_sites`) whose
  verdict is *refused* and whose condition these arguments meet, and every
  site nobody has examined, naming the site.

Config files are read as JSON where the path is a local folder, else through
``transformers.AutoConfig`` (a hub id).
"""

from __future__ import annotations

import ast
import os
from typing import Any, List, Mapping, Optional, Tuple

from ..draft_model import DFLASH, FIRST_RELEASE, checkpoint_config
from ..errors import is_plain_int
from ..plugin_calls import describe_exception

_HYBRID_NAMES = ("mamba", "nemotron_h", "qwen3_next", "minimax", "kimi", "deepseek_v4", "falcon_h1", "jamba",
                 "lfm2", "granitemoehybrid", "muse")
"""Model types and architectures (lower case, substrings) of the hybrid or family-specific targets
SGLang's DFLASH-only sites treat apart."""

PLACEHOLDER_MODEL_PATH = "dummy"
"""The model path of the ``ServerArgs`` ``check`` builds where the operator gave no ``--model-path``
(SGLang's argument pipeline needs one): no model, so no config is looked up for it (on the hub, that
is a request, retried for ~20 s where there is no network)."""


def draft_model_faults(offered: Any, policy: Any, server_args: Any, version: str, ndt: Optional[int],
                       draft_config: bool = True) -> List[str]:
    """What a draft-model plugin meets with these arguments (see the module doc;
    ``draft_config`` False: not the checkpoint, which ``check`` was not given)."""
    from packaging.version import InvalidVersion, Version

    declared = offered.spec.draft_model
    try:
        if Version(version) < Version(FIRST_RELEASE):
            return [f"a worker with its own draft model needs SGLang {FIRST_RELEASE}+ (the V2 speculative schema); "
                    f"SGLang {version} is not served"]
    except InvalidVersion:
        pass
    if server_args is None:
        return []
    found = config_faults(declared, policy, server_args, ndt) if draft_config and declared.layout == DFLASH else []
    return found + site_faults(offered, server_args)


def config_faults(declared: Any, policy: Any, server_args: Any, ndt: Optional[int]) -> List[str]:
    """The draft checkpoint against the target and the block, DFlash layout."""
    path = getattr(server_args, "speculative_draft_model_path", None)
    if not path:
        return ["--speculative-draft-model-path is not set; the worker loads its draft model from it"]
    draft, where = read_config(path)
    if isinstance(draft, str):
        return [f"--speculative-draft-model-path {path}: {draft}"]
    target, target_where = read_config(getattr(server_args, "model_path", None))
    found: List[str] = []
    architectures = draft.get("architectures") or []
    known = dflash_architectures()
    if not isinstance(architectures, list):
        found.append(f"{where} architectures = {architectures!r}: not a list of architecture names")
    elif known and not set(map(str, architectures)) & set(known):
        found.append(f"{where} architectures = {architectures}: not one of SGLang's DFlash draft models "
                     f"({', '.join(known)})")
    section = draft.get("dflash_config") or {}
    if not isinstance(section, dict):
        return found + [f"{where} dflash_config = {section!r}: not an object (block_size, target_layer_ids, "
                        "mask_token_id)"]

    def key(name: str) -> Tuple[Any, str]:
        return (section[name], f"dflash_config.{name}") if name in section else (draft.get(name), name)

    layers, layers_key = key("target_layer_ids")
    layers_listed = isinstance(layers, list) and all(is_plain_int(i) for i in layers)
    if layers is not None and not layers_listed:
        found.append(f"{where} {layers_key} = {layers!r}: not a list of the target's layer indices (ints), the "
                     "layers whose hidden states the draft reads")
    if isinstance(target, Mapping):
        if draft.get("hidden_size") != target.get("hidden_size"):
            found.append(f"{where} hidden_size = {draft.get('hidden_size')}: not the target's {target.get('hidden_size')} "
                         f"({target_where} hidden_size)")
        mask, mask_key = key("mask_token_id")
        vocab = target.get("vocab_size")
        if mask is None:
            found.append(f"{where} {mask_key} is not set; the worker needs the mask token's id")
        elif not isinstance(mask, int) or isinstance(vocab, int) and not 0 <= mask < vocab:
            found.append(f"{where} {mask_key} = {mask!r}: outside the target's vocabulary ({target_where} vocab_size = {vocab})")
        count = target.get("num_hidden_layers")
        if layers_listed and isinstance(count, int):
            outside = [i for i in layers if not 0 <= i < count]
            if outside:
                found.append(f"{where} {layers_key} = {layers}: {outside} outside the target's {count} layers "
                             f"({target_where} num_hidden_layers)")
    block, block_key = key("block_size")
    if block is not None and ndt is not None:
        width = policy.width_cache.get((ndt, True))
        if width is not None and block != width:
            found.append(f"{where} {block_key} = {block}: the draft runner drafts blocks of {width} at "
                         f"--speculative-num-draft-tokens {ndt}; serve it with --speculative-num-draft-tokens {block}")
    return found


def site_faults(offered: Any, server_args: Any) -> List[str]:
    """The release's refused DFLASH-only sites whose condition holds: one line per condition,
    naming each of its sites and what to change (:data:`~..engine.dflash_sites.REMEDIES`)."""
    from ..engine.dflash_sites import CONDITIONS, REMEDIES

    holding: dict = {}
    sites: dict = {}
    for site, judged in refused_sites():
        if judged.need not in holding:
            holding[judged.need] = condition_holds(judged.need, offered, server_args)
        if holding[judged.need]:
            sites.setdefault((judged.need, judged.why), []).append(f"{site.where} ({site.function}: {site.code!r})")
    return [f"not served{'' if need == 'always' else ' when ' + CONDITIONS[need]}: SGLang decides for DFLASH alone there ({why}) at "
            f"{', '.join(where)}; {REMEDIES.get(need, 'start SGLang without it')}"
            for (need, why), where in sites.items()]


def overlap_refused(offered: Any) -> bool:
    """Whether the installed release refuses this algorithm under its overlap scheduler for its
    draft model alone (0.5.14's overlap ``FutureMap`` decides for DFLASH alone): it then runs
    only with ``--disable-overlap-schedule``."""
    return offered.spec.draft_model is not None and any(j.need == "overlap" for _, j in refused_sites())


def refused_sites() -> List[Tuple[Any, Any]]:
    """``(site, verdict)`` of the installed release's DFLASH-only sites whose verdict is *refused*."""
    from ..engine.dflash_sites import REFUSED, dflash_sites, verdict
    from ..engine.probe import source_file

    scheduler = source_file("sglang.srt.managers.scheduler")
    if scheduler is None:
        return []
    judged = ((site, verdict(site)) for site in dflash_sites(scheduler.parents[1]))
    return [(site, v) for site, v in judged if v.kind == REFUSED]


def condition_holds(name: str, offered: Any, args: Any) -> bool:
    """Whether the arguments meet a condition of :data:`~..engine.dflash_sites.CONDITIONS`."""
    def arg(field: str, default: Any = None) -> Any:
        return getattr(args, field, default)

    if name == "always":
        return True
    if name == "overlap":
        return offered.spec.supports_overlap and not arg("disable_overlap_schedule", False)
    if name == "npu":
        return str(arg("device") or "").startswith("npu")
    if name == "disaggregation":
        return (arg("disaggregation_mode") or "null") != "null"
    if name == "dp_attention":
        return bool(arg("enable_dp_attention", False))
    if name == "context_parallel":
        return (arg("attn_cp_size") or 1) > 1 or bool(arg("enable_prefill_cp", False)) \
            or bool(arg("enable_prefill_context_parallel", False))
    if name == "hybrid_target":
        target, _ = read_config(arg("model_path"))
        return isinstance(target, Mapping) and hybrid_target(target)
    if name == "unified_memory":
        return bool(arg("enable_unified_memory", False))
    if name == "block_verification":
        return bool(arg("speculative_use_block_verification", False))
    if name == "draft_window":
        return arg("speculative_draft_window_size") is not None
    if name == "fp4_kv":
        return "fp4" in str(arg("kv_cache_dtype") or "")
    if name == "metadata_glue":
        return os.environ.get("SGLANG_ENABLE_METADATA_GLUE_GRAPH", "").lower() in ("1", "true", "yes")
    raise ValueError(f"unknown condition {name!r}")


def hybrid_target(config: Mapping) -> bool:
    """A target that is not a dense-attention transformer, from its HF config:
    a mamba / linear-attention / sliding-window layer, or a family SGLang's
    DFLASH-only sites treat apart (:data:`_HYBRID_NAMES`)."""
    names = [str(config.get("model_type", "")), *map(str, config.get("architectures") or [])]
    if any(part in name.lower() for name in names for part in _HYBRID_NAMES):
        return True
    layer_types = config.get("layer_types") or []
    if any(kind != "full_attention" for kind in layer_types):
        return True
    return bool(config.get("sliding_window")) and config.get("use_sliding_window", True) is not False


def read_config(path: Optional[str]) -> Tuple[Any, str]:
    """``(config dict, where)`` for a model folder (:func:`~..draft_model.checkpoint_config`) or hub id,
    or ``(why, where)`` when it cannot be read (``"no path"`` for none, or :data:`PLACEHOLDER_MODEL_PATH`)."""
    if not path or path == PLACEHOLDER_MODEL_PATH:
        return "no path", "config.json"
    config, where = checkpoint_config(path)
    if config is not None:
        return config, where
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(path, trust_remote_code=False).to_dict(), where
    except Exception as exc:  # no such hub id, no network, an unknown model type
        return f"cannot read {where}: {describe_exception(exc)}", where


def dflash_architectures() -> Tuple[str, ...]:
    """The architecture names the installed release registers for its DFlash
    draft models (``EntryClass`` of ``models/dflash.py``, read, not imported)."""
    from ..engine.probe import source_file

    path = source_file("sglang.srt.models.dflash")
    if path is None:
        return ()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            return tuple(v.id for v in values if isinstance(v, ast.Name))
    return ()
