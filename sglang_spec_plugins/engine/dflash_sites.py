"""Every place SGLang decides something for its DFLASH family alone, found in its source.

A plugin algorithm answers False to every ``is_*()`` predicate of SGLang's
algorithm enum and has its own name, so wherever SGLang asks
``spec_algorithm.is_dflash()`` / ``is_dflash_family()`` or compares the
algorithm's name with ``"DFLASH"`` (``==``, ``!=``, ``in (...)``), a plugin
whose worker has its own draft model gets the non-DFLASH branch. :func:`dflash_sites`
parses ``sglang/srt`` (files that mention DFLASH; nothing is imported) and
records each such place outside the DFLASH family's own files
(``speculative/dflash*.py``, ``models/dflash.py``, ``speculative/dspark*``),
with the function it is in, so that each can be served or refused by name
(:mod:`sglang_spec_plugins.patches.draft_model`, the start-up check).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import List, NamedTuple, Optional, Tuple


OWN_FILES = r"(^|/)(dflash[^/]*|dspark[^/]*)\.py$|(^|/)dspark_components/"
"""The DFLASH family's own files: their DFLASH branches are DFLASH's, not a decision about other algorithms
(a pattern, compiled where the files are read: the loader imports this module for :data:`VERDICTS`)."""

PREDICATES = ("is_dflash", "is_dflash_family")
"""The enum predicates that are true only for the DFLASH family."""

NAME = "DFLASH"

_CANDIDATE = r"\.(?:%s)\s*\(\s*\)|[\"']%s[\"']" % ("|".join(PREDICATES), NAME)
"""Text without which a file holds no site (a predicate called without arguments, or the name as a string):
only the files that match are parsed."""


class DflashSite(NamedTuple):
    """One DFLASH-only decision: where (``file`` relative to ``sglang/srt``,
    ``line``), in which function (``function``: its qualname in the file,
    nested functions included), what it asks (``test``: ``is_dflash_family()``,
    ``is_dflash()`` or ``== "DFLASH"``), of what (``receiver``: the expression
    the predicate is called on, or compared), and the source line (``code``)."""

    file: str
    line: int
    function: str
    test: str
    receiver: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def key(self) -> Tuple[str, str]:
        """``(file, function)``: how a site's verdict is looked up, stable across releases."""
        return self.file, self.function

    @property
    def module(self) -> str:
        return "sglang.srt." + self.file[: -len(".py")].replace("/", ".")

    @property
    def outer(self) -> str:
        """The top-level function or ``Class.method`` holding the site (what a patch rebuilds)."""
        parts = self.function.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 and parts[0][:1].isupper() else parts[0]


def dflash_sites(srt: Path) -> Tuple[DflashSite, ...]:
    """The sites of the release whose ``sglang/srt`` folder is ``srt``, by file and line."""
    return _sites(str(srt))


@functools.lru_cache(maxsize=None)
def _sites(srt: str) -> Tuple[DflashSite, ...]:
    from .worker_reads import parsed  # not at import: the loader imports this module, plans kept from before read nothing

    root = Path(srt)
    own_files, candidate = re.compile(OWN_FILES), re.compile(_CANDIDATE)
    found: List[DflashSite] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if own_files.search(rel):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if not candidate.search(text):
            continue
        lines = text.splitlines()
        _visit(parsed(path), [], rel, lines, found)
    return tuple(sorted(found, key=lambda s: (s.file, s.line, s.test)))


def _visit(node: ast.AST, scope: List[str], rel: str, lines: List[str], found: List[DflashSite]) -> None:
    for child in ast.iter_child_nodes(node):
        inner = scope + [child.name] if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else scope
        test = _test(child)
        if test is not None:
            found.append(DflashSite(rel, child.lineno, ".".join(scope) or "<module>", test[0], test[1],
                                    lines[child.lineno - 1].strip()))
        _visit(child, inner, rel, lines, found)


def _test(node: ast.AST) -> Optional[Tuple[str, str]]:
    """``(test, receiver)`` when ``node`` is a DFLASH-only predicate call or name comparison."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PREDICATES
            and not node.args and not node.keywords):
        return f"{node.func.attr}()", ast.unparse(node.func.value)
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        for op, right in zip(node.ops, node.comparators):
            left = operands[operands.index(right) - 1]
            if isinstance(op, (ast.Eq, ast.NotEq)):
                for named, other in ((left, right), (right, left)):
                    if isinstance(named, ast.Constant) and named.value == NAME:
                        return f'{"==" if isinstance(op, ast.Eq) else "!="} "{NAME}"', ast.unparse(other)
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)) \
                    and any(isinstance(e, ast.Constant) and e.value == NAME for e in right.elts):
                return f'{"in" if isinstance(op, ast.In) else "not in"} (..."{NAME}"...)', ast.unparse(left)
    return None


# -- What each site means for a plugin whose worker has its own draft model --

DECLARED, ANSWERED, REFUSED = "declared", "answered", "refused"


class Verdict(NamedTuple):
    """What a draft-model plugin gets at a site.

    ``declared``: the site asks the plugin's :class:`~sglang_spec_plugins.draft_model.DraftModel`
    (``need``: the field) instead of the DFLASH predicate (``patches.draft_model``);
    ``answered``: the non-DFLASH branch is right for a plugin worker built on the
    draft-model base (``why``); ``refused``: the start-up check refuses a
    draft-model plugin, naming the site, when ``need`` (a condition of
    :data:`CONDITIONS`) holds."""

    kind: str
    need: str
    why: str


CONDITIONS = {
    "always": "always (nothing in this package serves it)",
    "overlap": "the worker runs under the overlap scheduler (supports_overlap=True and overlap on)",
    "npu": "--device npu",
    "disaggregation": "--disaggregation-mode other than null",
    "dp_attention": "--enable-dp-attention",
    "context_parallel": "context parallelism (--attn-cp-size > 1 or prefill context parallel)",
    "hybrid_target": "a target that is not a dense-attention transformer (mamba, linear attention, sliding window, "
                     "or a family SGLang overrides for DFLASH)",
    "unified_memory": "--enable-unified-memory",
    "block_verification": "--speculative-use-block-verification",
    "draft_window": "--speculative-draft-window-size",
    "fp4_kv": "an fp4 KV cache (--kv-cache-dtype fp4_e2m1)",
    "metadata_glue": "SGLANG_ENABLE_METADATA_GLUE_GRAPH=1",
}
"""When a refused site applies, by name (the start-up check evaluates them)."""

REMEDIES = {
    "always": "serve it on a release whose sites docs/reference/draft-model-sites.md lists, or with SGLang's own DFLASH",
    "overlap": "start SGLang with --disable-overlap-schedule (releases without these sites serve it overlapped)",
}
"""What the operator changes where a refused site's condition holds, by condition; any other:
start SGLang without what the condition names."""


def _d(need: str, why: str) -> Verdict:
    return Verdict(DECLARED, need, why)


def _a(why: str) -> Verdict:
    return Verdict(ANSWERED, "", why)


def _r(condition: str, why: str) -> Verdict:
    assert condition in CONDITIONS, condition
    return Verdict(REFUSED, condition, why)


_ALGORITHM_OBJECT = "a method of SGLang's algorithm enum; the plugin's algorithm object answers it itself"
_NOT_OVERLAP = "overlap scheduling only"
_HYBRID = "hybrid (mamba / linear-attention / sliding-window) or family-specific targets only"

VERDICTS = {
    # -- declared: the patch asks the DraftModel declaration ------------------
    ("model_executor/model_runner.py", "ModelRunner.__init__"):
        _d("capture_target_layers", "the target's layers to capture, read off the draft config (up to 0.5.15)"),
    ("model_executor/model_runner_components/spec_aux_hidden_state.py", "_resolve_dflash_aux_hidden_state"):
        _d("capture_target_layers", "the target's layers to capture, read off the draft config, and the draft's "
                                    "layer count the KV budget sizes with"),
    ("model_executor/model_runner_components/misc_utils.py", "resolve_aux_hidden_states_width"):
        _d("capture_target_layers", "the packed aux-hidden-state buffer the worker reads in the same step"),
    ("model_executor/runner/prefill_cuda_graph_runner.py", "PrefillCudaGraphRunner.__init__"):
        _d("capture_target_layers", "prefill CUDA graphs capture every token's hidden states (FULL)"),
    ("model_executor/pool_configurator.py", "DefaultPoolConfigurator.__init__"):
        _d("kv_pool", "the draft pool's bytes per token in the target's KV budget"),
    ("model_executor/pool_configurator.py", "_dflash_draft_cell_size"):
        _d("kv_pool", "the draft pool's bytes per token in the target's KV budget"),
    ("mem_cache/kv_cache_configurator.py", "KVCacheConfigurator.__post_init__"):
        _d("kv_pool", "the draft pool's bytes per token, from the draft config"),
    ("model_executor/model_runner.py", "ModelRunner.configure_kv_cache_dtype"):
        _d("kv_pool", "the draft pool's KV dtype resolved as for a DFLASH draft"),
    ("model_executor/model_runner_components/kv_pool_runtime.py", "is_post_capture_kv_active"):
        _d("kv_pool", "the draft pool follows the target pool's post-capture resize"),
    ("arg_groups/overrides.py", "post_capture_kv_sizing_planned"):
        _d("kv_pool", "post-capture KV sizing is planned for the draft pool too"),
    ("model_executor/runner/decode_cuda_graph_runner.py", "DecodeCudaGraphRunner.capture_one_shape.run_once"):
        _d("input_embeds", "the draft runner's graphs capture the forward with input_embeds"),
    ("model_executor/runner/decode_cuda_graph_runner.py", "DecodeCudaGraphRunner.load_batch"): (
        ("or self.model_runner.spec_algorithm.is_dflash", _r("dp_attention", "graph batch size under MLP TP gather "
                                                                             "(DP attention) only")),
        ("", _d("input_embeds", "each replay copies the step's input_embeds into the captured buffer"))),
    ("model_executor/runner/decode_cuda_graph_runner.py", "DecodeCudaGraphRunner.execute"):
        _d("input_embeds", "each replay copies the step's input_embeds into the captured buffer (0.5.15-0.5.17)"),
    ("model_executor/runner/decode_cuda_graph_runner.py", "DecodeCudaGraphRunner.can_run_graph"):
        _r("dp_attention", "graph batch size under MLP TP gather (DP attention) only"),
    # -- answered by the worker contract, the hooks or other patches ----------
    ("model_executor/runner/decode_cuda_graph_runner.py", "DecodeCudaGraphRunner.get_spec_info"):
        _a("the captured verify input: the capture_input patch builds DFLASH's for a chain-shaped plugin"),
    ("speculative/spec_info.py", "create_dummy_verify_input"):
        _a("the warm-up verify input: the runners.dummy_run patch builds DFLASH's for a chain-shaped plugin"),
    ("speculative/base_spec_worker.py", "BaseSpecWorker._draft_model_runners"):
        _a("runner discovery: the draft-model worker's draft_worker.draft_runners is (its draft runner,)"),
    ("speculative/spec_utils.py", "spec_prepare_for_decode"):
        _a("KV reservation: eagle_prepare_for_decode reserves speculative_num_draft_tokens slots per request, the "
           "draft block (its width is checked at start-up)"),
    ("speculative/spec_utils.py", "spec_need_hidden_states"):
        _a("hidden states relayed through the overlap FutureMap; the worker carries none"),
    ("managers/scheduler_components/batch_result_processor.py", "SchedulerBatchResultProcessor._resolve_spec_v2_tokens"):
        _a("KV accounting of eagle_prepare_for_decode, which prepares the worker's decode (0.5.14)"),
    ("managers/scheduler.py", "Scheduler.handle_generate_request"):
        _a("DFLASH's request validation; the worker refuses what it cannot serve, request by request"),
    ("managers/scheduler.py", "Scheduler._handle_generate_request"):
        _a("DFLASH's request validation; the worker refuses what it cannot serve, request by request"),
    ("managers/scheduler.py", "Scheduler.init_model_worker"):
        _a("admission heuristic (min free slots) DFLASH turns on by default; --min-free-slots-delay opts in"),
    ("managers/scheduler.py", "Scheduler._should_delay_dflash_prefill_for_batching"):
        _a("admission heuristic (prefill batching delay) DFLASH turns on (0.5.14)"),
    ("managers/scheduler.py", "Scheduler.run_event_loop"):
        _a("the WAR barrier on the target runner, as for every non-DFLASH algorithm (0.5.14)"),
    ("managers/scheduler_components/internal_state.py", "SchedulerInternalStateController._validate_accept_threshold"):
        _a("DFLASH's runtime accept threshold; SGLang refuses the setting for other algorithms"),
    ("speculative/spec_sampling_mask.py", "validate_spec_sampling_mask_request"):
        _a("return_sampling_mask requests: SGLang refuses them for other algorithms"),
    ("arg_groups/speculative_hook.py", "handle_speculative_decoding"):
        _a("DFLASH's own argument rules; the plugin's validate_server_args and the start-up check judge its own"),
    ("model_executor/runner/decode_cuda_graph_runner.py", "DecodeCudaGraphRunner.__init__"): (
        ("enable_metadata_glue", _r("metadata_glue", "the metadata glue graph, which DFLASH forces off")),
        ("", _a("the draft worker's TARGET_VERIFY gate (0.5.14), which the runners.cuda_graph patch answers from "
                "sgl_spec_draft_may_verify"))),
    ("model_executor/runner_utils/shared_read_event.py", "maybe_publish_prefill_shared_read_done"):
        _a("an early read-done signal DFLASH opts into; the plugin gets the conservative default"),
    ("layers/attention/flashattention_backend.py", "FlashAttentionBackend.__init__"):
        _a("the seq_lens_cpu mirror DFLASH opts out of; the plugin keeps it (0.5.15)"),
    ("speculative/spec_info.py", "SpeculativeAlgorithm.is_dflash_family"): _a(_ALGORITHM_OBJECT),
    ("speculative/spec_info.py", "SpeculativeAlgorithm.supports_target_verify_for_draft"):
        _a(_ALGORITHM_OBJECT + " (sgl_spec_draft_may_verify)"),
    ("speculative/spec_info.py", "SpeculativeAlgorithm.handle_server_args"):
        _a(_ALGORITHM_OBJECT + " (validate_server_args and the start-up check)"),
    ("speculative/spec_info.py", "SpeculativeAlgorithm.create_worker"): _a(_ALGORITHM_OBJECT + " (worker_factory)"),
    ("speculative/spec_info.py", "SpeculativeAlgorithm.supports_grammar_overlap"):
        _a(_ALGORITHM_OBJECT + " (the supports_grammar_overlap capability)"),
    ("speculative/spec_info.py", "SpeculativeAlgorithm.supports_prefill_shared_read_done"):
        _a(_ALGORITHM_OBJECT + " (the supports_prefill_shared_read_done capability)"),
    # -- refused when the feature is on ----------------------------------------
    ("managers/overlap_utils.py", "FutureMap._resolve_spec_extras"): _r("overlap", _NOT_OVERLAP),
    ("managers/overlap_utils.py", "FutureMap.resolve_seq_lens_cpu"): _r("overlap", _NOT_OVERLAP),
    ("speculative/spec_info.py", "SpeculativeAlgorithm.build_disagg_draft_input"):
        _r("disaggregation", "the decode side's draft input under PD disaggregation"),
    ("disaggregation/mooncake/conn.py", "MooncakeKVManager._validate_peer_state_layout"):
        _r("disaggregation", "the KV layout peers exchange under PD disaggregation"),
    ("hardware_backend/npu/attention/ascend_backend.py", "AscendAttnBackend.init_forward_metadata"):
        _r("npu", "Ascend attention metadata"),
    ("hardware_backend/npu/graph_runner/npu_graph_runner.py", "NPUGraphRunner.execute"):
        _r("npu", "Ascend graph replay"),
    ("speculative/draft_parallel.py", "legacy_draft_parallel_spec"):
        _r("dp_attention", "the draft's TP group under DP attention / context parallel"),
    ("speculative/draft_parallel.py", "legacy_draft_attn_tp_size"):
        _r("dp_attention", "the draft's attention TP size under DP attention"),
    ("arg_groups/cp_tp_group_sharing_hook.py", "resolve_cp_tp_group_sharing"):
        _r("context_parallel", "TP-group sharing under context parallelism"),
    ("arg_groups/attention_hook.py", "handle_linear_attn_backend"): _r("hybrid_target", _HYBRID),
    ("server_args.py", "ServerArgs._handle_linear_attn_backend"): _r("hybrid_target", _HYBRID),
    ("server_args.py", "ServerArgs._validate_mamba_extra_buffer"): _r("hybrid_target", _HYBRID),
    ("arg_groups/model_overrides/nemotron_h.py", "_nemotron_h_overrides"): _r("hybrid_target", _HYBRID),
    ("arg_groups/model_overrides/minimax_m3.py", "_minimax_m3_overrides"): _r("hybrid_target", _HYBRID),
    ("arg_groups/layernorm_sp_hook.py", "validate_layernorm_sp"): _r("hybrid_target", _HYBRID),
    ("models/kimi_k3.py", "_carries_bank_slices"): _r("hybrid_target", _HYBRID),
    ("layers/attention/deepseek_v4_backend.py", "DeepseekV4AttnBackend.prepare_prefill_shared_read_snapshot"):
        _r("hybrid_target", _HYBRID),
    ("mem_cache/kv_cache_configurator.py", "KVCacheConfigurator._build_hybrid_req_pool"): _r("hybrid_target", _HYBRID),
    ("mem_cache/kv_cache_configurator.py", "KVCacheConfigurator._fused_draft_decision"):
        _r("unified_memory", "the fused draft KV region of the unified memory pool"),
    ("mem_cache/kv_cache_configurator.py", "KVCacheConfigurator._fused_draft_for_mamba_factory"):
        _r("unified_memory", "the fused draft KV region of the unified memory pool"),
    ("mem_cache/kv_cache_configurator.py", "KVCacheConfigurator._fused_draft_from_target_buffer"):
        _r("unified_memory", "the fused draft KV region of the unified memory pool"),
    ("mem_cache/hybrid_cache/hybrid_pool_assembler.py", "validate_fused_hicache_draft"):
        _r("unified_memory", "the fused draft KV region under HiCache"),
    ("arg_groups/kv_cache_hook.py", "handle_unified_memory_pool"):
        _r("unified_memory", "the unified memory pool's draft region"),
    ("arg_groups/kv_cache_hook.py", "handle_kv4_compatibility"): _r("fp4_kv", "fp4 KV cache compatibility"),
}
"""Every site of the supported releases 0.5.14-0.5.23, by ``(file, function)``; where one
function holds sites of different meanings, ``(code fragment, verdict)`` pairs, the first
fragment the site's line holds deciding (``""`` holds always). A site found that is not here
is refused whenever a draft-model plugin is served."""

UNKNOWN = Verdict(REFUSED, "always", "a DFLASH-only decision this package has not examined")


def verdict(site: DflashSite) -> Verdict:
    """What a draft-model plugin gets at ``site``."""
    found = VERDICTS.get(site.key, UNKNOWN)
    if isinstance(found, Verdict):
        return found
    return next(judged for fragment, judged in found if fragment in site.code)


def summary() -> dict:
    """The installed release's sites by verdict (``doctor``): how many are served from the
    declaration and answered, the refused ones by condition, and the unexamined ones by place."""
    from .probe import source_file

    scheduler = source_file("sglang.srt.managers.scheduler")
    if scheduler is None:
        return {}
    found = {"served": 0, "answered": 0, "refused": {}, "unexamined": []}
    for site in dflash_sites(scheduler.parents[1]):
        judged = verdict(site)
        if judged is UNKNOWN:
            found["unexamined"].append(site.where)
        elif judged.kind == DECLARED:
            found["served"] += 1
        elif judged.kind == ANSWERED:
            found["answered"] += 1
        else:
            found["refused"][judged.need] = found["refused"].get(judged.need, 0) + 1
    return found
