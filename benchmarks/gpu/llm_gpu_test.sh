#!/usr/bin/env bash
# On the device: the LLM coder's Triton kernels judged on the GPU (issue 22, "on the GPU once"):
# a scripted model server (tests/fakes/openai_server.py) answers the planner and the coder, one
# kernel the model writes and one library call it makes run through the real evaluator on CUDA
# (tests/agents/llm/test_llm_kernel_library.py, its gpu test). Carry .llm (made here by
# benchmarks/gpu/llm_site.sh) and .whl. Writes $OUT/llm_gpu_test.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/prelude.sh
[ -d /tmp/llm-site/site312 ] || { mkdir -p /tmp/llm-site && tar xJf .llm/site312.tar.xz -C /tmp/llm-site; }
PYTHONPATH="/tmp/llm-site/site312:$PYTHONPATH" LITELLM_LOCAL_MODEL_COST_MAP=True timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider \
  tests/agents/llm/test_llm_kernel_library.py -rA > "$OUT/llm_gpu_test.log" 2>&1
echo "llm gpu test: exit $?"; tail -15 "$OUT/llm_gpu_test.log"
