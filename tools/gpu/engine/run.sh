#!/usr/bin/env bash
# On the H200 machine, from the root of the tree a device call sent (carry: .e2e, built by site.sh):
#   tools/gpu/engine/run.sh PHASE...      phases: setup single flashinfer triton deterministic precision widths
#                                         draft draft_accepting drafts draft_speed sbd tp margins draft_margins soak
#                                         triton_widths triton_margins (0.5.17) train real real_margins
#                                         sampled_verify profile
# SGLANG_RELEASE (default 0.5.16): the release site.sh built, read from its folder: 0.5.16 .e2e, 0.5.17 .e2e17
# (carry .e2e17/site.tar.xz, .e2e17/wheels and .e2e17/cache if any). The other phases were written for 0.5.16
# and run on 0.5.17 too, but their expectations are 0.5.16's (there triton below ndt is refused: tri_pl_below_refused)
# setup   unpack .e2e/site.tar.xz to /tmp/site, install .e2e/wheels to /tmp/site-proj (.e2e/wheels-BUILD to
#         /tmp/site-proj-BUILD), write the model
# single  two queues of engines at once, one per GPU (GPU 0: triton, GPU 1: flashinfer; on a one-GPU
#         machine both on GPU 0, one after the other): plain decoding, PROMPT_LOOKUP below and at ndt,
#         graphs on and off, SGLang's NGRAM, and triton below ndt, which the loader refuses
# flashinfer, triton: one of those queues on GPU 0
# deterministic  the same checks under SGLang's --enable-deterministic-inference (batch-invariant kernels):
#         flashinfer below ndt and triton at ndt, graphs on and off, and SGLang's NGRAM; the two queues run
#         at once on GPU 0 (nothing is timed: these engines check outputs only)
# precision  the same checks with the model served in float16 (flashinfer, below and at ndt) and float32
#         (triton at ndt, tl.dot in IEEE float32), where bf16's near-ties are gone; both queues at once on GPU 0
# widths  PROMPT_LOOKUP with widths by batch size (plugins_widths.toml: 4 below 8 requests, 2 from 8) on
#         flashinfer in float16, graphs on and off, batches that shrink as they decode (--staggered), and the
#         plain engines; all four at once on GPU 0
# draft   the DFLASH_BLOCK example (a drafter with its own draft model) and SGLang's own DFLASH on the tiny
#         target with a one-layer dummy DFlash draft (blocks of 4), flashinfer, graphs on and off, batches
#         1, 8, 32, 64: plain decoding, native DFLASH, DFLASH_BLOCK at the block (W = B = 4) and below it
#         (W = 2); two engines at a time on GPU 0. compare.py: identity with plain and, at W = B, outputs and
#         verify steps against native DFLASH
# draft_accepting  the same on a tiny target that keeps returning to one token and a draft that guesses it
#         (make_model.py --favoured / --accepting): drafts accepted, tokens per verify step > 1
# drafts  draft and draft_accepting at once (four engines at a time on GPU 0; nothing is timed)
# drafts_soak  drafts and soak at once (the soak's tokens/s then come from a shared GPU); DRAFTS="da": only
#         draft_accepting's engines, DRAFTS="da sbd": those and sbd's
# draft_speed  a Llama-3-8B-shaped target and a two-layer draft, both dummy weights, blocks of 16, graphs on,
#         timed at batches 1, 8, 32, 64: plain, native DFLASH, DFLASH_BLOCK at W = B = 16 and at W = 4; one
#         engine at a time (DRAFT_SPEED: which of "base native block part", in that order). compare.py:
#         DFLASH_BLOCK's tokens/s against native DFLASH's, W = 4 against W = 16
# sbd     the SBD example (the target predicts a masked block; worker-chosen widths per step,
#         plugins_sbd.toml) on the favoured tiny target, flashinfer, graphs on and off, batches 1, 8, 32, 64,
#         and plain decoding; two engines at a time on GPU 0 (nothing is timed)
# tp      tensor parallelism 2 on GPUs 0 and 1
# draft_margins  margins (below) of the draft (dm_, da_) and sbd engines' divergences, in one margins.jsonl
# margins how close each divergence of results/engine/divergences.json was (MARGINS=flashinfer: one backend)
# startup benchmarks/startup.py --only loader --host: the loader's start-up on this machine (results/startup_gpu_host.json)
# warm    two untimed engines on the tiny Llama (plain, sampled; native DFLASH): flashinfer's JIT kernels compile
#         (~300 s on a fresh machine), so that a later call on this machine (a soak) starts warm
# soak    tools/gpu/soak.py: 2,000 mixed requests (mixed lengths, sampled, logprob and JSON-schema shares as
#         --mix says, ~5% aborted mid-stream, a KV pool small enough that SGLang retracts) through sglang.Engine
#         with PROMPT_LOOKUP, and through SGLang's HTTP server, overlap on (--sync: off), against the plain
#         engine's outputs request by request; the three processes at once on GPU 0, done within SOAK_BUDGET
#         seconds (default 430); results in $OUT/$SOAK_NAME/ (summary.json); SOAK_MODEL: the target (default the
#         tiny Llama), SOAK_ARGS: soak.py's flags (--algorithm DFLASH_BLOCK --draft DIR; --algorithm
#         FAULTY_LOOKUP: PROMPT_LOOKUP faulting in ~1% of its steps; --mix; --mem-fraction for two soaks at once)
# triton_widths (0.5.17: triton lays each verify batch out at its verify input's width; 0.5.16 refuses any
#         width but ndt there, so the phase is skipped on it): float16 (TW_DTYPE=float32 to try it: 0.5.16's
#         float32 engines failed in sgl-kernel 0.4.5's RMSNorm, which 0.5.17 pins and calls the same way), graphs
#         on and off, groups of four engines at once on GPU 0, nothing timed: the SBD example (worker-chosen widths
#         2/4/8 per step, plugins_sbd.toml) on the favoured target, batches 1, 8, 32, 64 (trs_*); PROMPT_LOOKUP
#         with widths by batch size (plugins_widths.toml: 4 below 8 requests, 2 from 8, ndt 4) on batches that
#         shrink as they decode (--staggered), and at width 2 below ndt 4 (plugins_below.toml, what 0.5.16
#         refused) (trw_*); each beside the plain engines of its model and setting. compare.py: identity with plain
# triton_margins (0.5.17) margins (above) of PROMPT_LOOKUP's triton divergences (results/triton_0.5.17/
#         divergences.json, the trw_ engines) on the plain triton engine of the tiny target in float16
# train   tools/gpu/train/train.py --preset gpu: from a fixed seed, deterministically, a byte-level BPE of 4,096
#         tokens, a 6-layer Llama (hidden 768, bf16: /tmp/real-target, with prompts.json: the benchmark prompts)
#         and a 2-layer DFlash draft, blocks of 16 (/tmp/real-draft), on the image's Python standard library (5% of
#         its files held out); nothing is trained where both folders hold the checkpoints their train.json hashed
#         (a later call on the same machine); TRAIN_FORCE=1 trains again. $OUT/train.json (loss curve, held-out
#         perplexity, the draft's acceptance on held-out text, timings, hashes; against results/real/train.json
#         where committed: matches_recorded) and $OUT/prompts.json; ~4-6 min, bounded by TRAIN_TIMEOUT (420 s).
#         Meanwhile, on a machine that has not trained yet (TRAIN_WARM=0: not), two untimed engines on the tiny
#         Llama (warm_plain: sampled requests, no graphs; warm_dflash: native DFLASH) compile flashinfer's JIT kernels
#         for real (~300 s on a fresh machine); then the phase waits for the compiles a stopped one left running
#         (COMPILE_WAIT, 240 s at most)
# real    every drafter on the trained target (run train first, in the same call or an earlier one on this
#         machine): flashinfer, CUDA graphs, batches 1, 8, 32, 64 (batch 1: four requests one after another),
#         --max-running-requests 64 for every engine, the held-out prompts of prompts.json (completion: a file's
#         first lines; edit: a file, a comment asking for it again, its first lines), 128 new tokens, greedy; an
#         untimed pass (identity, and the warm-up), then REAL_ROUNDS (3) timed rounds, each every batch size and
#         kind once; one engine at a time. REAL_ENGINES (in this order by default): base (plain, SGLang's overlap
#         scheduler), sync (plain, --disable-overlap-schedule), ngram (SGLang's NGRAM, ndt 8), pl_w2 pl_w4 pl_w8
#         (PROMPT_LOOKUP at ndt 8, static width), pl_batch (widths by batch size), pl_acc (widths by acceptance),
#         native (SGLang's DFLASH, blocks of 16), block (DFLASH_BLOCK at W = B = 16), part_w4 part_w8 (W = 4, 8).
#         SGLang's own engines (base, sync, ngram, native) run with SGLANG_PLUGINS naming no plugin and with
#         overlap as SGLang sets it (sync: off); the plugin engines with --disable-overlap-schedule, or with
#         SGLang's default where REAL_OVERLAP=1 (labels rlo_*). REAL_SAMPLED=1: every request at temperature
#         0.7, top-p 0.9 (labels rs_*, rso_*); else greedy (rl_*). ~1 min an engine: split REAL_ENGINES over calls.
#         Untimed, every request kind of engine_check.py --kinds (penalties, min_new_tokens with logit_bias,
#         logprobs, JSON schema, regex, sampled): kinds_base (plain without overlap: the reference), kinds_pl,
#         kinds_block, kinds_sbd (SBD, plugins_sbd.toml) (each step's own code under
#         SGLANG_SPEC_PLUGINS_SYNC_CHECK=1), kinds_native; their greedy cells at the batch sizes KINDS_BATCHES says
#         (default 1,8,32,64); these untimed engines run at once, after the timed ones
#         (compare.py --kinds PREFIX reads them).
# sampled_verify  benchmarks/sampled_verify.py: a sampled verify's host and GPU cost, the worker bases' acceptance
#         (with the release's renormalising kernels, and with torch's) against native DFLASH's, at batches 1-64,
#         vocabularies 4,096 and 128,256 ($OUT/sampled_verify.json; ~1 min; nothing but the GPU's own kernels)
# profile the trained target (train first), flashinfer, CUDA graphs, every request at temperature 0.7, top-p 0.9
#         (PROFILE_GREEDY=1: greedy), overlap on: after an untimed pass of every batch size, one batch of
#         each of PROFILE_BATCHES (1,32) under SGLang's profiler, PROFILE_STEPS (16) forward steps (engine_check.py
#         --profile; labels pso_*, plo_*); PROFILE_ENGINES (block native) one at a time: their traces come back in
#         profiles.tar.xz (tools/gpu/engine/trace_steps.py reads them)
# real_margins  margins (below) of the real engines' divergences (results/real/divergences.json, compare.py
#         --divergences), on the plain engine of the trained target
# PYSPY=PREFIX (carry .whl/py-spy.xz: py-spy's binary, stripped and xz-compressed, ~1.8 MB): each engine whose
#         label starts with PREFIX runs under py-spy record (--idle, PYSPY_RATE samples a second, 200), its
#         scheduler too: $OUT/spy/LABEL.raw (trace_steps.py --spy reads them). Not for an engine its time limit
#         may stop: timeout stops py-spy, and the engine under it goes on
# $OUT gets: engines.jsonl (one line per engine), timeline.txt, logs.tar.xz, and the JIT caches.
set -u
T0=$(date +%s); H=$PWD/tools/gpu/engine
R=${SGLANG_RELEASE:-0.5.16}
case $R in 0.5.16) E=$PWD/.e2e ;; 0.5.17) E=$PWD/.e2e17 ;; *) echo "run.sh: SGLANG_RELEASE=$R: 0.5.16 or 0.5.17" >&2; exit 2 ;; esac
OUT=${OUT:-/tmp/engine-out}; LOGS=${ENGINE_LOGS:-/tmp/engine-logs}; mkdir -p "$OUT" "$LOGS"  # the engines' logs
DEADLINE=${DEADLINE:-510}   # no engine starts later than this many seconds after the start
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OUT
export FLASHINFER_CUDA_ARCH_LIST=9.0a TORCH_CUDA_ARCH_LIST=9.0a
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -d /usr/local/cuda ] && export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PATH=$PATH:/usr/local/cuda/bin
export ENGINE_MODEL=/tmp/tiny-llama
export PYTHONPATH=/tmp/site-proj:/tmp/site
GPUS=$(nvidia-smi -L | wc -l)
tl() { echo "[t=$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/timeline.txt"; }

setup() {
  nvidia-smi -L; python3 -V; nproc
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))"
  if [ "$(cat /tmp/site/.unpacked 2>/dev/null)" != "$R" ]; then  # a warm machine may hold the other release's
    rm -rf /tmp/site && mkdir -p /tmp/site && tar -xJf $E/site.tar.xz -C /tmp/site && echo $R > /tmp/site/.unpacked
  fi
  for cache in $E/cache/*.tar.xz; do [ -f "$cache" ] && tar -xJf "$cache" -C / ; done
  # this tree's wheels into /tmp/site-proj; another build's (.e2e/wheels-BUILD, e2e_speculative.py's LABEL@BUILD)
  # into /tmp/site-proj-BUILD
  for d in $E/wheels $E/wheels-*; do
    [ -d "$d" ] || continue
    site=/tmp/site-proj${d#$E/wheels}
    rm -rf $site && python3 -m pip install -q --no-index --no-deps --no-compile --target $site $d/*.whl
  done
  python3 -c "import sglang, sglang_spec_plugins, flashinfer, sgl_kernel; print('sglang', sglang.__version__, 'flashinfer', flashinfer.__version__)"
  if [ -n "${PYSPY:-}" ]; then  # the carried .whl/py-spy.xz: py-spy's binary from its wheel, stripped, xz-compressed
    mkdir -p /tmp/spy/bin && xz -dc .whl/py-spy.xz > /tmp/spy/bin/py-spy && chmod +x /tmp/spy/bin/py-spy
  fi
  [ -f $ENGINE_MODEL/model.safetensors ] || python3 $H/make_model.py $ENGINE_MODEL
  # the draft-model phases' checkpoints (drafts in SGLang's DFlash layout; make_model.py says how)
  [ -f /tmp/draft-dummy/config.json ] || python3 $H/make_model.py /tmp/draft-dummy --draft-for $ENGINE_MODEL --block 4
  [ -f /tmp/tiny-favoured/model.safetensors ] || python3 $H/make_model.py /tmp/tiny-favoured --favoured $FAVOURED
  [ -f /tmp/draft-accepting/model.safetensors ] || \
    python3 $H/make_model.py /tmp/draft-accepting --draft-for /tmp/tiny-favoured --block 4 --accepting $FAVOURED
  [ -f /tmp/llama8b/config.json ] || python3 $H/make_model.py /tmp/llama8b --shape llama3-8b --config-only
  [ -f /tmp/draft8b/config.json ] || python3 $H/make_model.py /tmp/draft8b --draft-for /tmp/llama8b --block 16 --layers 2
}

# engine GPUS LABEL [ENV=VALUE ...] -- ARGS: one engine in its own process, killed at its timeout
engine() {
  local gpus=$1 label=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local left=$(( DEADLINE - ($(date +%s) - T0) ))
  if [ $left -lt 40 ]; then tl "SKIP $label: past the deadline"; echo "{\"label\": \"$label\", \"ok\": false, \"skipped\": \"deadline\"}" >> "$OUT/engines.jsonl"; return; fi
  local limit=$(( left < ${ENGINE_TIMEOUT:-330} ? left : ${ENGINE_TIMEOUT:-330} ))
  tl "START $label on GPU $gpus ($*) limit ${limit}s"
  local t=$(date +%s)
  # from /tmp: no ./plugins.toml there, so an engine without SGLANG_SPEC_PLUGINS_CONFIG loads no plugin
  local spy=()  # PYSPY=PREFIX: an engine whose label starts with it, and its scheduler, sampled by py-spy
  [ -n "${PYSPY:-}" ] && [[ $label == "$PYSPY"* ]] && mkdir -p $OUT/spy && spy=(/tmp/spy/bin/py-spy record --subprocesses --idle --rate ${PYSPY_RATE:-200} \
    --format raw -o $OUT/spy/$label.raw --)
  (cd /tmp && env CUDA_VISIBLE_DEVICES=$gpus "${envs[@]}" timeout -k 10 $limit "${spy[@]}" python3 $H/engine_check.py "$label" "$@" \
     > $LOGS/$label.log 2>&1)
  local rc=$?
  tl "END $label rc=$rc $(( $(date +%s) - t ))s; GPU memory in use: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader | tr '\n' ' ')"
  grep -q "\"label\": \"$label\"" "$OUT/engines.jsonl" 2>/dev/null || \
    echo "{\"label\": \"$label\", \"ok\": false, \"rc\": $rc, \"error\": \"no result line: killed at its time limit, or by SGLang after a scheduler failed (compare.py reads the loader's refusal from the log)\"}" >> "$OUT/engines.jsonl"
}

BELOW=SGLANG_SPEC_PLUGINS_CONFIG=$H/plugins_below.toml
AT=SGLANG_SPEC_PLUGINS_CONFIG=$H/plugins_at.toml
PL="--spec PROMPT_LOOKUP --ndt 4"

triton_queue() {
  local g=$1
  engine $g tri_base_cg -- --backend triton --timing
  engine $g tri_pl_at_cg $AT -- --backend triton $PL --timing --sampled
  engine $g tri_pl_below_refused $BELOW -- --backend triton $PL --batches 1
  engine $g tri_base_nocg -- --backend triton --no-cuda-graph
  engine $g tri_pl_at_nocg $AT -- --backend triton $PL --no-cuda-graph
  engine $g tri_ngram_cg -- --backend triton --spec NGRAM --ndt 4 --timing
}
flashinfer_queue() {
  local g=$1
  engine $g fi_base_cg -- --backend flashinfer --timing
  engine $g fi_pl_below_cg $BELOW -- --backend flashinfer $PL --timing --sampled
  engine $g fi_pl_below_nocg $BELOW -- --backend flashinfer $PL --no-cuda-graph
  engine $g fi_base_nocg -- --backend flashinfer --no-cuda-graph
  engine $g fi_pl_at_cg $AT -- --backend flashinfer $PL --timing
  engine $g fi_ngram_cg -- --backend flashinfer --spec NGRAM --ndt 4 --timing
  engine $g fi_pl_at_nocg $AT -- --backend flashinfer $PL --no-cuda-graph
}
# identity checks, untimed: PREFIX [engine_check flags...]; EXTRA: environment for every engine
flashinfer_checks() {
  local p=$1; shift
  engine 0 ${p}_base_cg ${EXTRA:-} -- --backend flashinfer "$@"
  engine 0 ${p}_pl_below_cg ${EXTRA:-} $BELOW -- --backend flashinfer $PL "$@"
  engine 0 ${p}_base_nocg ${EXTRA:-} -- --backend flashinfer --no-cuda-graph "$@"
  engine 0 ${p}_pl_below_nocg ${EXTRA:-} $BELOW -- --backend flashinfer $PL --no-cuda-graph "$@"
  engine 0 ${p}_pl_at_cg ${EXTRA:-} $AT -- --backend flashinfer $PL "$@"
  engine 0 ${p}_ngram_cg ${EXTRA:-} -- --backend flashinfer --spec NGRAM --ndt 4 "$@"
}
triton_checks() {
  local p=$1; shift
  engine 0 ${p}_base_cg ${EXTRA:-} -- --backend triton "$@"
  engine 0 ${p}_pl_at_cg ${EXTRA:-} $AT -- --backend triton $PL "$@"
  engine 0 ${p}_base_nocg ${EXTRA:-} -- --backend triton --no-cuda-graph "$@"
  engine 0 ${p}_pl_at_nocg ${EXTRA:-} $AT -- --backend triton $PL --no-cuda-graph "$@"
  engine 0 ${p}_ngram_cg ${EXTRA:-} -- --backend triton --spec NGRAM --ndt 4 "$@"
}
F16="--dtype float16"
WIDTHS=SGLANG_SPEC_PLUGINS_CONFIG=$H/plugins_widths.toml
widths_runs() {
  engine 0 fiw_base_cg -- --backend flashinfer $F16 --staggered &
  engine 0 fiw_base_nocg -- --backend flashinfer $F16 --staggered --no-cuda-graph &
  engine 0 fiw_pl_cg $WIDTHS -- --backend flashinfer $PL $F16 --staggered &
  engine 0 fiw_pl_nocg $WIDTHS -- --backend flashinfer $PL $F16 --staggered --no-cuda-graph &
  wait
}
FAVOURED=29
DRAFT=SGLANG_SPEC_PLUGINS_CONFIG=$H/plugins_draft.toml
DRAFT_W2=SGLANG_SPEC_PLUGINS_CONFIG=$H/plugins_draft_w2.toml
DRAFT_W4=SGLANG_SPEC_PLUGINS_CONFIG=$H/plugins_draft_w4.toml
# draft_checks PREFIX TARGET DRAFT: plain, native DFLASH, DFLASH_BLOCK at W = B = 4 and W = 2, graphs on and off
draft_checks() {
  local p=$1 on="--backend flashinfer --model $2 --batches 1,8,32,64"
  local spec="--ndt 4 --draft $3"
  engine 0 ${p}_base_cg -- $on & engine 0 ${p}_base_nocg -- $on --no-cuda-graph & wait
  engine 0 ${p}_native_cg -- $on --spec DFLASH $spec & engine 0 ${p}_native_nocg -- $on --spec DFLASH $spec --no-cuda-graph & wait
  engine 0 ${p}_block_cg $DRAFT -- $on --spec DFLASH_BLOCK $spec &
  engine 0 ${p}_block_nocg $DRAFT -- $on --spec DFLASH_BLOCK $spec --no-cuda-graph & wait
  engine 0 ${p}_part_cg $DRAFT_W2 -- $on --spec DFLASH_BLOCK $spec &
  engine 0 ${p}_part_nocg $DRAFT_W2 -- $on --spec DFLASH_BLOCK $spec --no-cuda-graph & wait
}
# draft_phase dm|da|sbd: the draft phase on dummy weights, draft_accepting's, or sbd's
draft_phase() {
  case $1 in dm) draft_checks dm $ENGINE_MODEL /tmp/draft-dummy ;; da) draft_checks da /tmp/tiny-favoured /tmp/draft-accepting ;;
    sbd) sbd_runs ;; esac
}
draft_speed_runs() {
  local on="--backend flashinfer --model /tmp/llama8b --batches 1,8,32,64 --new-tokens 32 --timing"
  local spec="--ndt 16 --draft /tmp/draft8b"
  for which in ${DRAFT_SPEED:-base native block part}; do case $which in
    base) engine 0 ds_base_cg -- $on ;;
    native) engine 0 ds_native_cg -- $on --spec DFLASH $spec ;;
    block) engine 0 ds_block_cg $DRAFT -- $on --spec DFLASH_BLOCK $spec ;;
    part) engine 0 ds_part_cg $DRAFT_W4 -- $on --spec DFLASH_BLOCK $spec ;;
  esac; done
}
soak_run() {  # SOAK_NAME (default soak): its results in $OUT/$SOAK_NAME, its logs in $LOGS/$SOAK_NAME
  local name=${SOAK_NAME:-soak}; mkdir -p $LOGS/$name
  (cd /tmp && ENGINE_MODEL=${SOAK_MODEL:-$ENGINE_MODEL} SOAK_LOGS=$LOGS/$name timeout -k 5 $(( ${SOAK_BUDGET:-430} + 20 )) \
     python3 $H/../soak.py coordinate --out "$OUT/$name" --budget ${SOAK_BUDGET:-430} ${SOAK_ARGS:-} > $LOGS/$name/soak.log 2>&1)
  tl "$name rc=$?"; tail -25 $LOGS/$name/soak.log
}
SBD=SGLANG_SPEC_PLUGINS_CONFIG=$H/plugins_sbd.toml
sbd_runs() {
  local on="--backend flashinfer --model /tmp/tiny-favoured --batches 1,8,32,64"
  engine 0 sbd_base_cg -- $on & engine 0 sbd_base_nocg -- $on --no-cuda-graph & wait
  engine 0 sbd_sbd_cg $SBD -- $on --spec SBD --ndt 8 & engine 0 sbd_sbd_nocg $SBD -- $on --spec SBD --ndt 8 --no-cuda-graph & wait
}
# triton_widths_runs: SBD's and PROMPT_LOOKUP's widths on triton (0.5.17), float16 (TW_DTYPE), untimed
triton_widths_runs() {
  local dt=${TW_DTYPE:-float16} x=""; [ "$dt" = float32 ] && x=TRITON_F32_DEFAULT=ieee
  local sbd="--backend triton --dtype $dt --model /tmp/tiny-favoured --batches 1,8,32,64"
  local pl="--backend triton --dtype $dt --staggered"
  engine 0 trs_base_cg $x -- $sbd & engine 0 trs_base_nocg $x -- $sbd --no-cuda-graph &
  engine 0 trs_sbd_cg $x $SBD -- $sbd --spec SBD --ndt 8 & engine 0 trs_sbd_nocg $x $SBD -- $sbd --spec SBD --ndt 8 --no-cuda-graph &
  wait
  engine 0 trw_base_cg $x -- $pl & engine 0 trw_base_nocg $x -- $pl --no-cuda-graph &
  engine 0 trw_pl_widths_cg $x $WIDTHS -- $pl $PL & engine 0 trw_pl_widths_nocg $x $WIDTHS -- $pl $PL --no-cuda-graph &
  wait
  engine 0 trw_pl_below_cg $x $BELOW -- $pl $PL & engine 0 trw_pl_below_nocg $x $BELOW -- $pl $PL --no-cuda-graph &
  wait
}
REAL_T=${REAL_TARGET:-/tmp/real-target} REAL_D=${REAL_DRAFT:-/tmp/real-draft}
NO_PLUGIN=SGLANG_PLUGINS=none-selected  # SGLang's load_plugins() starts no plugin: this package neither registers nor patches
train_run() {
  local expect=$H/../results/real/train.json args=""
  [ -f $expect ] && args="--expect $expect"
  [ -n "${TRAIN_FORCE:-}" ] && args="$args --force"
  # flashinfer's JIT kernels compiled while the GPU trains, on a machine that has not trained yet: real starts warm
  if [ "${TRAIN_WARM:-1}" = 1 ] && [ ! -f $REAL_T/train.json ]; then warm_engines; fi
  (cd /tmp && timeout -k 10 ${TRAIN_TIMEOUT:-420} python3 $H/../train/train.py --preset gpu --target $REAL_T --draft $REAL_D \
     --out "$OUT/train.json" $args > $LOGS/train.log 2>&1)
  tl "train rc=$?"; grep -E '^(TRAIN|against)' $LOGS/train.log
  wait; compiles_done
}
warm_engines() {  # in the background: two untimed engines on the tiny Llama compile flashinfer's JIT kernels
  # warm_plain without graphs: its sampled request, which compiles the sampling kernels (~3 min), starts at once
  engine 0 warm_plain -- --backend flashinfer --batches 1 --new-tokens 8 --sampling sampled --no-cuda-graph &
  engine 0 warm_dflash -- --backend flashinfer --batches 1 --new-tokens 8 --spec DFLASH --ndt 4 --draft /tmp/draft-dummy &
}
compiles_done() {  # a warm engine stopped at its limit leaves its JIT compiles running (nvcc under ninja): the next
  # engine would share the CPU with them and wait for their kernels (2026-12-07: 72 s, then 1.4-2.2x slower cells),
  # so wait until none runs (COMPILE_WAIT seconds at most, 240)
  local t=$(date +%s) compilers='ninja|nvcc|cicc|ptxas'
  while pgrep -f "$compilers" > /dev/null && [ $(( $(date +%s) - t )) -lt ${COMPILE_WAIT:-240} ]; do sleep 2; done
  tl "JIT compiles done after $(( $(date +%s) - t ))s of waiting$(pgrep -f "$compilers" > /dev/null && echo ' (some still run)')"
}
real_runs() {
  local p=rl plug="--overlap off"
  [ -n "${REAL_SAMPLED:-}" ] && p=rs
  [ -n "${REAL_OVERLAP:-}" ] && p=${p}o plug="--overlap on"
  if [ ! -f $REAL_T/model.safetensors ]; then tl "SKIP real: no trained target in $REAL_T (the train phase first)"; return; fi
  local on="--backend flashinfer --model $REAL_T --prompts $REAL_T/prompts.json --batches 1,8,32,64 --new-tokens 128"
  # untimed: identity, every request kind (KINDS_BATCHES: the greedy cells' batch sizes before the kinds)
  local checked="$on --min-requests 4 --max-running 64 --kinds --batches ${KINDS_BATCHES:-1,8,32,64}"
  on="$on --min-requests 4 --max-running 64 --timing --rounds ${REAL_ROUNDS:-3}"
  [ -n "${REAL_SAMPLED:-}" ] && on="$on --sampling sampled"
  local pl="--spec PROMPT_LOOKUP --ndt 8 $plug" dfb="--spec DFLASH_BLOCK --ndt 16 --draft $REAL_D $plug"
  local together=()  # the kinds_* engines: untimed, so they run at once, after the timed ones
  for which in ${REAL_ENGINES:-base sync ngram pl_w2 pl_w4 pl_w8 pl_batch pl_acc native block part_w4 part_w8}; do
    case $which in kinds_*) together+=($which); continue ;; esac
    real_engine $which
  done
  for which in "${together[@]}"; do real_engine $which & done
  wait
}
profile_runs() {
  local p=pso plug="--overlap on" sampling="--sampling sampled"
  [ -n "${PROFILE_GREEDY:-}" ] && p=plo sampling=""
  if [ ! -f $REAL_T/model.safetensors ]; then tl "SKIP profile: no trained target in $REAL_T (the train phase first)"; return; fi
  local on="--backend flashinfer --model $REAL_T --prompts $REAL_T/prompts.json --batches 1,8,32,64 --new-tokens 128"
  on="$on --max-running 64 $sampling --profile ${PROFILE_BATCHES:-1,32} --profile-steps ${PROFILE_STEPS:-16}"
  local dfb="--spec DFLASH_BLOCK --ndt 16 --draft $REAL_D $plug"
  for which in ${PROFILE_ENGINES:-block native}; do real_engine $which; done
}
real_engine() {  # one engine of real_runs or profile_runs (its variables: p, on, checked, pl, dfb)
  local which=$1
  case $which in
    base) engine 0 ${p}_base_cg $NO_PLUGIN -- $on --overlap on ;;
    sync) engine 0 ${p}_sync_cg $NO_PLUGIN -- $on --overlap off ;;
    ngram) engine 0 ${p}_ngram_cg $NO_PLUGIN -- $on --spec NGRAM --ndt 8 --overlap on ;;
    pl_w2) engine 0 ${p}_pl_w2_cg SGLANG_SPEC_PLUGINS_CONFIG=$H/plugins_real_pl_w2.toml -- $on $pl ;;
    pl_w4) engine 0 ${p}_pl_w4_cg SGLANG_SPEC_PLUGINS_CONFIG=$H/plugins_real_pl_w4.toml -- $on $pl ;;
    pl_w8) engine 0 ${p}_pl_w8_cg $AT -- $on $pl ;;
    pl_batch) engine 0 ${p}_pl_batch_cg SGLANG_SPEC_PLUGINS_CONFIG=$H/plugins_real_pl_batch.toml -- $on $pl ;;
    pl_acc) engine 0 ${p}_pl_acc_cg SGLANG_SPEC_PLUGINS_CONFIG=$H/plugins_real_pl_acc.toml -- $on $pl ;;
    native) engine 0 ${p}_native_cg $NO_PLUGIN -- $on --spec DFLASH --ndt 16 --draft $REAL_D --overlap on ;;
    block) engine 0 ${p}_block_cg $DRAFT -- $on $dfb ;;
    part_w4) engine 0 ${p}_part_w4_cg $DRAFT_W4 -- $on $dfb ;;
    part_w8) engine 0 ${p}_part_w8_cg SGLANG_SPEC_PLUGINS_CONFIG=$H/plugins_draft_w8.toml -- $on $dfb ;;
    # untimed, every request kind, each step's own code under torch.cuda.set_sync_debug_mode("error")
    kinds_base) engine 0 ${p}_kinds_base_cg $NO_PLUGIN -- $checked --overlap off ;;
    kinds_pl) engine 0 ${p}_kinds_pl_cg SGLANG_SPEC_PLUGINS_SYNC_CHECK=1 $AT -- $checked $pl ;;
    kinds_block) engine 0 ${p}_kinds_block_cg SGLANG_SPEC_PLUGINS_SYNC_CHECK=1 $DRAFT -- $checked $dfb ;;
    kinds_native) engine 0 ${p}_kinds_native_cg $NO_PLUGIN -- $checked --spec DFLASH --ndt 16 --draft $REAL_D --overlap on ;;
    kinds_sbd) engine 0 ${p}_kinds_sbd_cg SGLANG_SPEC_PLUGINS_SYNC_CHECK=1 $SBD -- $checked --spec SBD --ndt 8 $plug ;;
    *) tl "real: no engine $which" ;;
  esac
}
tp_runs() {
  engine 0,1 tp2_fi_pl_below_cg $BELOW -- --backend flashinfer $PL --tp 2 --batches 1,8
  engine 0,1 tp2_tri_pl_at_cg $AT -- --backend triton $PL --tp 2 --batches 1,8
  engine 0,1 tp2_fi_base_cg -- --backend flashinfer --tp 2 --batches 1,8
}

for phase in "$@"; do
  tl "PHASE $phase"
  case $phase in
    setup) setup > "$OUT/setup.log" 2>&1; tl "setup rc=$?" ;;
    single)
      if [ "$GPUS" -ge 2 ]; then triton_queue 0 & flashinfer_queue 1 & wait
      else flashinfer_queue 0; triton_queue 0; fi ;;
    flashinfer) flashinfer_queue 0 ;;
    triton) triton_queue 0 ;;
    deterministic) flashinfer_checks fidet --deterministic & triton_checks tridet --deterministic & wait ;;
    precision)  # float32 triton with tl.dot in IEEE float32, not tf32
      flashinfer_checks fi16 --dtype float16 & EXTRA=TRITON_F32_DEFAULT=ieee triton_checks tri32 --dtype float32 & wait ;;
    widths) widths_runs ;;
    triton_widths)
      if [ "$R" = 0.5.16 ]; then tl "SKIP triton_widths: 0.5.16's triton verifies at ndt only (SGLANG_RELEASE=0.5.17)"
      else triton_widths_runs; fi ;;
    draft) draft_checks dm $ENGINE_MODEL /tmp/draft-dummy ;;
    draft_accepting) draft_checks da /tmp/tiny-favoured /tmp/draft-accepting ;;
    drafts) draft_checks dm $ENGINE_MODEL /tmp/draft-dummy & draft_checks da /tmp/tiny-favoured /tmp/draft-accepting & wait ;;
    draft_speed) draft_speed_runs ;;
    sbd) sbd_runs ;;
    tp) tp_runs ;;
    soak) soak_run ;;
    startup)  # benchmarks/startup.py on this machine's SGLang and kernels, this package from its wheel; FA3 is not
      # in the slim site (site.sh), so the scheduler's backend is flashinfer, the engines' backend here
      (cd /tmp && timeout 420 python3 $H/../../../benchmarks/startup.py --only loader --host --backend flashinfer_backend --repeat ${STARTUP_REPEAT:-7} \
         --out "$OUT/startup_gpu_host.json" > $LOGS/startup.log 2>&1); tl "startup rc=$?"; tail -8 $LOGS/startup.log ;;
    drafts_soak)  # nothing here is timed against anything else: they share the GPU
      soak_run & for p in ${DRAFTS:-dm da}; do draft_phase $p & done; wait ;;
    draft_margins)  # the same for the draft-model and SBD engines' divergences (results/draft, results/sbd)
      for which in "dm $ENGINE_MODEL draft" "da /tmp/tiny-favoured draft" "sbd /tmp/tiny-favoured sbd"; do
        set -- $which
        (cd /tmp && ENGINE_MODEL=$2 timeout 300 python3 $H/margins.py $H/../results/$3/divergences.json flashinfer \
           --prefix ${1}_ > $LOGS/margins_$1.log 2>&1); tl "margins $1 rc=$?"
      done ;;
    triton_margins)  # PROMPT_LOOKUP's triton divergences of 0.5.17 (trw_*: the tiny target, drawn on the GPU)
      if [ "$R" = 0.5.16 ]; then tl "SKIP triton_margins: the divergences are 0.5.17's (SGLANG_RELEASE=0.5.17)"
      else (cd /tmp && timeout 300 python3 $H/margins.py $H/../results/triton_0.5.17/divergences.json triton \
              --prefix trw_ --dtype float16 > $LOGS/margins_trw.log 2>&1); tl "margins trw rc=$?"; fi ;;
    train) train_run ;;
    warm) warm_engines; wait; compiles_done ;;
    real) real_runs ;;
    profile) profile_runs ;;
    sampled_verify)
      timeout 200 python3 $H/../../../benchmarks/sampled_verify.py --out "$OUT/sampled_verify.json" \
        > $LOGS/sampled_verify.log 2>&1; tl "sampled_verify rc=$?"; tail -3 $LOGS/sampled_verify.log ;;
    real_margins)  # the real engines' divergences, on the trained target's plain engine
      (cd /tmp && ENGINE_MODEL=$REAL_T timeout 300 python3 $H/margins.py $H/../results/real/divergences.json flashinfer \
         --prefix ${REAL_PREFIX:-rl_} > $LOGS/margins_real.log 2>&1); tl "margins real rc=$?" ;;
    margins)  # how close each divergence of results/engine/divergences.json was (margins.py)
      for backend in ${MARGINS:-flashinfer triton}; do
        (cd /tmp && timeout 200 python3 $H/margins.py $H/../results/engine/divergences.json $backend \
           > $LOGS/margins_$backend.log 2>&1); tl "margins $backend rc=$?"
      done ;;
  esac
done
tl "ALL DONE"
[ -n "${NO_ARCHIVE:-}" ] && exit 0   # a caller that archives what it needs itself (benchmarks/e2e_speculative.sh)
tar -C "$(dirname "$LOGS")" -cJf "$OUT/logs.tar.xz" "$(basename "$LOGS")"
for d in "$OUT"/*/; do  # each soak's folder (SOAK_NAME), one file each: few files come back from a call
  [ -d "$d" ] && n=$(basename "$d") && tar -C "$OUT" -cJf "$OUT/$n.tar.xz" "$n" && rm -rf "$OUT/$n"
done
# JIT caches (flashinfer's kernels, Triton's), to carry into the next call as .e2e/cache/*.tar.xz
tar -C / -cJf "$OUT/jit_flashinfer.tar.xz" root/.cache/flashinfer 2>/dev/null
# (and SGLang's own JIT kernels, tvm-ffi's: rope, activation, the KV-cache store)
tar -C / -cJf "$OUT/jit_triton.tar.xz" root/.triton tmp/torchinductor_root root/.cache/tvm-ffi 2>/dev/null
ls -la "$OUT"
