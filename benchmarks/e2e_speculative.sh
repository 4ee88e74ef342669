#!/usr/bin/env bash
# On the H200, from the root of the tree a device call sent; carry .e2e (tools/gpu/engine/site.sh builds it;
# from the second call on it also holds e2e-state/, the results so far, and cache/, the JIT caches):
#   benchmarks/e2e_speculative.sh [LABEL,...]
#   ENGINE_GROUPS="A,B,C;D,E" ROUNDS=3 benchmarks/e2e_speculative.sh
# SGLang 0.5.16 and the wheels are set up as the engine checks set them up (tools/gpu/engine/run.sh setup),
# then benchmarks/e2e_speculative.py runs the engines not yet in e2e-state until DEADLINE (default 470 s) from
# this script's start; with ENGINE_GROUPS, each group (labels separated by commas, groups by semicolons) is resident
# together and timed in ROUNDS rounds (e2e_speculative.py together), one group after the other; PROFILE=1: then
# one batch of E2E_PROFILE_BATCH requests (default 1) per engine (PROFILE_ONLY: of these labels) under SGLang's
# profiler (each record's "profile": where the host waits; the traces in profiles.tar).
# Another build of this package and its examples, timed beside this tree's (an engine labelled LABEL@BUILD):
# its wheels in .e2e/wheels-BUILD (carried), installed into /tmp/site-proj-BUILD by run.sh setup.
# $OUT gets e2e_speculative.jsonl (every engine so far), continuations.json, logs.tar.xz (logs/ and configs/) and
# the JIT caches.
set -u
T0=$(date +%s); E=$PWD/.e2e; OUT=${OUT:-/tmp/e2e-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export FLASHINFER_CUDA_ARCH_LIST=9.0a TORCH_CUDA_ARCH_LIST=9.0a
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -d /usr/local/cuda ] && export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PATH=$PATH:/usr/local/cuda/bin
lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket)"; uptime
NO_ARCHIVE=1 OUT=/tmp/e2e-setup tools/gpu/engine/run.sh setup
cat /tmp/e2e-setup/setup.log
export PYTHONPATH=/tmp/site-proj:/tmp/site
if [ -n "${ENGINE_GROUPS:-}" ]; then
  IFS=';' read -ra groups <<< "$ENGINE_GROUPS"
  for group in "${groups[@]}"; do
    left=$(( ${DEADLINE:-470} - ($(date +%s) - T0) ))
    [ $left -gt 60 ] || { echo "SKIP group $group: ${left}s left"; continue; }
    python3 benchmarks/e2e_speculative.py together --out "$OUT" --state "$E/e2e-state" --labels "$group" \
      --rounds "${ROUNDS:-3}" --deadline $left ${PROFILE:+--profile} ${PROFILE_ONLY:+--profile-only "$PROFILE_ONLY"}
  done
else
  python3 benchmarks/e2e_speculative.py run --out "$OUT" --state "$E/e2e-state" --deadline $(( ${DEADLINE:-470} - ($(date +%s) - T0) )) --engine-seconds "${ENGINE_SECONDS:-150}" ${1:+--only "$1"}
fi
tar -C "$OUT" -cJf "$OUT/logs.tar.xz" logs configs 2>/dev/null && rm -rf "$OUT/logs" "$OUT/configs"
[ -d "$OUT/profiles" ] && tar -C "$OUT" -cf "$OUT/profiles.tar" profiles && rm -rf "$OUT/profiles"
tar -C / -cJf "$OUT/jit_flashinfer.tar.xz" root/.cache/flashinfer 2>/dev/null
tar -C / -cJf "$OUT/jit_triton.tar.xz" root/.triton 2>/dev/null
ls -la "$OUT"
