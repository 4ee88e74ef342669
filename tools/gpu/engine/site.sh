#!/usr/bin/env bash
# On the CPU machine: build what the H200 needs to run a real SGLang engine, into a git-ignored folder.
#   tools/gpu/engine/site.sh                         (from the repository root; ~1-5 min): SGLang 0.5.16 into .e2e/
#   SGLANG_RELEASE=0.5.17 tools/gpu/engine/site.sh   SGLang 0.5.17 into .e2e17/
# Both pin torch 2.11.0, the H200 image's torch (2.11.0+cu130); 0.5.18 on pin 2.13+, too large to carry.
# $E/site.tar.xz   SGLang and the cp312 packages the H200 image lacks, unpacked and xz-compressed
#                  (0.5.16 ~49 MB, 0.5.17 ~47 MB; one device call carries 64 MiB)
# $E/wheels/       this package and the example drafters (DFLASH_BLOCK's included), built from the working tree
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=${SGLANG_RELEASE:-0.5.16}
# Each release's own pins, read off its wheel's METADATA (unzip -p sglang-R-*.whl '*/METADATA' | grep ^Requires-Dist):
# torch==2.11.0 and sglang-kernel==0.4.5 in both; flashinfer_python[cu13] 0.6.14 (0.5.16), 0.6.15.post1 (0.5.17)
case $R in
  0.5.16) E=.e2e; FLASHINFER=0.6.14 ;;
  0.5.17) E=.e2e17; FLASHINFER=0.6.15.post1 ;;
  *) echo "site.sh: SGLANG_RELEASE=$R: only 0.5.16 and 0.5.17 (torch 2.11.0, the H200's; later releases pin 2.13+)" >&2
     exit 2 ;;
esac
mkdir -p $E/dl $E/slim $E/wheels
P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
   --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
   --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64
   --platform manylinux_2_35_x86_64"
if [ ! -f $E/site.tar.xz ]; then
  # transformers 5.12.1 (both releases' pin): the image's 5.17 breaks SGLang 0.5.16's import
  python3 -m pip download -q $P -d $E/dl \
    sglang==$R sglang-kernel==0.4.5 flashinfer-python==$FLASHINFER apache-tvm-ffi==0.1.11 \
    transformers==5.12.1 tokenizers==0.22.2 xgrammar==0.2.1 \
    pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    orjson==3.13.0 msgspec==0.23.0 pyzmq==27.3.0 pybase64==1.5.1 setproctitle==1.3.8 \
    fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 opentelemetry-api==1.45.2 sniffio==1.3.1 \
    openai==2.6.1 distro==1.9.0 partial-json-parser==0.2.1.1.post7 \
    ipython==9.18.1 traitlets==5.16.1 compressed-tensors==0.20.1 loguru==0.7.3 gguf==0.19.0 dill==0.4.1
  # Files an H200 never loads: sglang-kernel's FA3/FlashMLA/InfLLM/sm100 builds (loaded lazily; an H200
  # loads sm90/common_ops), 383 -> 15 MB; xgrammar's static library and headers, 45 -> 13 MB.
  rm -rf $E/unpacked && mkdir $E/unpacked
  for w in $E/dl/*.whl; do unzip -q -o "$w" -d $E/unpacked; done
  rm -rf $E/unpacked/sgl_kernel/flash_ops.abi3.so $E/unpacked/sgl_kernel/flashmla_ops.abi3.so \
         $E/unpacked/sgl_kernel/sm100 $E/unpacked/sgl_kernel/infllm_ops* $E/unpacked/xgrammar/lib $E/unpacked/xgrammar/include
  if [ "$R" != 0.5.16 ]; then
    # 0.5.17's native extensions outside an Engine's path (23 MB), each imported only inside a function behind its
    # switch: the Rust server (srt/server/_core: SGLANG_RUST_SERVER), the native gRPC server (srt/grpc/_core:
    # --grpc-port), Inkling's Rust image preprocessing (srt/multimodal/_core: SGLANG_INKLING_RS_MM_PREPROCESS)
    rm -f $E/unpacked/sglang/srt/server/_core.*.so $E/unpacked/sglang/srt/grpc/_core.*.so \
          $E/unpacked/sglang/srt/multimodal/_core.*.so
  fi
  tar -C $E/unpacked -cf - . | xz -9e -T2 > $E/site.tar.xz  # -9e: 2 MB under -6, which the 64 MiB a call carries needs
  rm -rf $E/unpacked
fi
rm -f $E/wheels/*.whl
# setuptools keeps each project's build/ between builds and packs what it holds: a module since deleted from the
# source went on travelling in the wheel (examples/prompt_lookup_drafter's chain.py, 2026-12-03): build afresh
rm -rf build examples/{prompt_lookup,sbd,controlled_acceptance,dflash_block}_drafter/build tools/gpu/faulty_drafter/build
# tools/gpu/faulty_drafter: the soak's FAULTY_LOOKUP, PROMPT_LOOKUP faulting at random (soak.py --algorithm FAULTY_LOOKUP)
python3 -m pip wheel -q --no-deps -w $E/wheels . examples/prompt_lookup_drafter examples/sbd_drafter \
  examples/controlled_acceptance_drafter examples/dflash_block_drafter tools/gpu/faulty_drafter
# the HTTP server's imports the image lacks, seen on the H200 (2026-12-02) one at a time: sglang's openai entry
# points import jsonschema and soundfile; fastapi's form routes need python-multipart. The module-level imports
# of sglang.srt.entrypoints.http_server beyond the Engine's were read off the wheel: jsonschema, soundfile and
# zstandard (the image has it), torch_npu (an NPU-only path)
python3 -m pip download -q $P -d $E/wheels jsonschema==4.25.1 jsonschema-specifications==2025.9.1 referencing==0.37.0 \
  rpds-py==0.28.0 attrs==25.4.0 soundfile==0.13.1 cffi==2.0.0 pycparser==2.23 python-multipart==0.0.20
ls -la $E/site.tar.xz $E/wheels
