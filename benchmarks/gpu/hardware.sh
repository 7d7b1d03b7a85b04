#!/usr/bin/env bash
# Hardware feedback on a 4-GPU machine, in one call: Nsight Compute / timeline profiles of suite
# references and of batch-winning candidates at world size 4 (rank 0, then every rank), then two
# things at once on the two GPU pairs: the GPU tests (pair 0,1) and the world-size-2 profiles
# (pair 2,3). Each part under its own timeout; logs in $OUT. A stopped run resumes (profile_gpu.py
# skips what it profiled already).
#   bash benchmarks/gpu/hardware.sh [SECONDS]
set -u
. "$(dirname "$0")/prelude.sh"
budget=${1:-560}
left() { echo $(( budget - SECONDS > 20 ? budget - SECONDS : 20 )); }
best() { for d in results/gpu/h200x4-ws4-r2 results/gpu/h200x4-ws4; do f=$d/jobs/$1/best_kernel.py; [ -f "$f" ] && { echo "$1=$f"; return; }; done; }
refs=tp_allreduce_residual_rmsnorm,vocab_parallel_cross_entropy,causal_conv1d_cp,tp_allgather_gemm,all_reduce_large
cands=()
for w in tp_allreduce_residual_rmsnorm vocab_parallel_cross_entropy causal_conv1d_cp; do c=$(best $w); [ -n "$c" ] && cands+=(--candidate "$c"); done
timeout $(( $(left) / 2 )) python3 benchmarks/profile_gpu.py --world-size 4 --ranks 0 all --workloads $refs "${cands[@]}" \
  --timeout 90 --out results/profiles/h200x4-ws4 > "$OUT/profile-ws4.log" 2>&1
echo "profile ws4 exit $?"; tail -16 "$OUT/profile-ws4.log"
t=$(left)
( export CUDA_VISIBLE_DEVICES=0,1
  timeout $(( t / 2 )) python3 -m pytest -q -m gpu -p no:cacheprovider tests/agents/test_fused_matmul.py tests/agents/test_prefetch.py \
    tests/roofline/test_calibrate.py > "$OUT/gpu-tests-agents.log" 2>&1; echo "exit $?" >> "$OUT/gpu-tests-agents.log"
  # tests/services' conftest needs PostgreSQL and Redis clients; these tests use neither.
  timeout $(( t / 2 )) python3 -m pytest -q -m gpu -p no:cacheprovider --noconftest tests/services/worker/profiler > "$OUT/gpu-tests-profiler.log" 2>&1
  echo "exit $?" >> "$OUT/gpu-tests-profiler.log" ) &
CUDA_VISIBLE_DEVICES=2,3 timeout "$t" python3 benchmarks/profile_gpu.py --world-size 2 --ranks 0 all --workloads $refs "${cands[@]}" \
  --timeout 90 --out results/profiles/h200x4-gpus23-ws2 > "$OUT/profile-ws2.log" 2>&1
echo "profile ws2 exit $?"
wait
tail -5 "$OUT"/gpu-tests-*.log; tail -12 "$OUT/profile-ws2.log"
for f in "$OUT"/gpu-tests-*.log; do cp "$f" "results/gpu/h200x4-gpus01-$(basename "$f")"; done
bring_back
