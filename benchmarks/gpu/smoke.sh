#!/usr/bin/env bash
# First contact with a multi-GPU machine: the evaluator's tests on CUDA (2 ranks), a small batch
# that tries every offline strategy on a handful of structurally different workloads, and one
# Nsight Compute profile. Everything lands in $OUT (logs, junit, a tarball of the batch).
set -u
cd "$(dirname "$0")/../.."
. benchmarks/gpu/env.sh
{ nvidia-smi -L; nvidia-smi topo -m; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'gpus', torch.cuda.device_count())"; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
timeout 260 python3 -m pytest -q -x tests/evaluator -k "cuda" -p no:cacheprovider --junitxml="$OUT/evaluator-cuda.xml" > "$OUT/evaluator-cuda.log" 2>&1
echo "evaluator tests exit $?"; tail -5 "$OUT/evaluator-cuda.log"
timeout 240 python3 -m kloom.cli bench run -n 2 --device cuda --max-iters 4 --no-kb --out /tmp/smoke-batch \
  -w all_reduce_small -w tp_allreduce_residual_rmsnorm -w tp_allgather_gemm -w moe_dispatch \
  -w vocab_parallel_cross_entropy -w cp_ring_attention -w pipeline_send_recv -w conv2d_halo > "$OUT/batch.log" 2>&1
echo "batch exit $?"; tail -25 "$OUT/batch.log"
python3 -m kloom.cli bench report /tmp/smoke-batch > /dev/null 2>&1
tar czf "$OUT/smoke-batch.tgz" -C /tmp smoke-batch 2>/dev/null
