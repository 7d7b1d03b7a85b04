#!/usr/bin/env bash
# ParallelKernelBench's development split through kloom on a machine of several GPUs: kloom's own
# importer (`kloom suite import pkb`, PKB's own input builder at its default 1024 x 1024 bf16
# shape), then `kloom bench run` over the imported suite (offline strategist, the real evaluator,
# every candidate checked on every rank against the reference), resumable across calls.
#
#   bash benchmarks/gpu/pkb.sh WORLD_SIZE SECONDS [extra kloom bench run args]
#
# Carry `.whl` (SQLAlchemy for the batch's records), `.gpu` (a copy of the dev split:
# `mkdir -p .gpu/third_party && cp -r ../shared/third_party/parallelkernelbench .gpu/third_party/`)
# and the batch folder (default results/gpu/pkb-ws<N>, or KLOOM_BATCH_DIR) when it already holds
# finished jobs: they are not redone. PKB_ONLY (a regular expression) runs the matching workloads
# only. $OUT receives the batch as pkb-ws<N>.tgz, the log and the
# report. PKB_DEVICE=cpu runs the same logic on a CPU (ci shapes) as a dry run.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/prelude.sh
ws=$1; budget=$2; shift 2
device="${PKB_DEVICE:-cuda}"
src="${PKB_SRC:-.gpu/third_party/parallelkernelbench}"
dir="${KLOOM_BATCH_DIR:-results/gpu/pkb-ws${ws}}"
suite=/tmp/kloom-pkb-suite
mkdir -p "$dir"
# The same import every call (a fixed folder, the same files), so a resumed batch finds its jobs.
rm -rf "$suite"
python3 -m kloom.cli suite import pkb "$src" --out "$suite" > "$OUT/import.log" 2>&1 || { cat "$OUT/import.log"; exit 1; }
tail -5 "$OUT/import.log"
export KLOOM_EVAL_TIMING_BUDGET_S=${KLOOM_EVAL_TIMING_BUDGET_S:-0.5}
args=(bench run --suite "$suite" -n "$ws" --device "$device" --max-iters "${PKB_MAX_ITERS:-3}"
      --max-wall-s "${PKB_MAX_WALL_S:-40}" --profile none --no-kb --out "$dir" "$@")
echo "kloom suite import pkb $src --out $suite; python3 -m kloom.cli ${args[*]}" > "$dir/command.txt"
left=$((budget - SECONDS - 40))
echo "batch budget ${left} s after ${SECONDS} s of prelude and import"
# One process per workload: a crash of the batch process (seen: glibc's "free(): invalid next
# size" after a symmetric-memory job) costs that workload only, with its traceback in the log.
# The pending workloads (no finished job in the batch yet) are dealt round-robin to as many groups
# of WS GPUs as the machine has; each group runs its share into a batch folder of its own (the
# first group into the batch itself), and the others' jobs are moved into the batch at the end.
export PYTHONFAULTHANDLER=1
end=$((SECONDS + left))
gpus=$([ "$device" = cuda ] && python3 -c "import torch; print(torch.cuda.device_count())" || echo "$ws")
groups=$(( gpus / ws )); [ "$groups" -ge 1 ] || groups=1
pending=$(for w in $(ls "$suite" | grep '\.py$' | sed 's/\.py$//' | sort -t_ -k2 -n); do
  python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1])).get('state') not in ('succeeded','failed','cancelled','stopped'))" \
    "$dir/jobs/$w/trajectory.json" 2>/dev/null || echo "$w"; done | grep -E "${PKB_ONLY:-.}")
echo "$(echo $pending | wc -w) workloads pending; $groups group(s) of $ws GPU(s)"
run_group() {  # group index, its batch folder, its workloads
  local g=$1 gdir=$2; shift 2
  local visible; visible=$(seq -s, $((g * ws)) $((g * ws + ws - 1)))
  mkdir -p "$gdir"
  for w in "$@"; do
    rest=$((end - SECONDS)); [ "$rest" -gt 20 ] || { echo "group $g: out of time before $w"; break; }
    CUDA_VISIBLE_DEVICES=$visible timeout -s INT "$rest" python3 -m kloom.cli "${args[@]/#$dir/$gdir}" -w "$w" 2>&1 \
      | tee -a "$OUT/pkb-ws${ws}-g${g}.log" | grep -E "^(start|pkb_|Fatal|free|Segm|Abort)|Error" | grep -v -i warning | tail -6
  done
}
for g in $(seq 0 $((groups - 1))); do
  share=$(echo $pending | tr ' ' '\n' | awk -v g="$g" -v n="$groups" 'NF && (NR - 1) % n == g')
  gdir="$dir"; [ "$g" -eq 0 ] || gdir="$dir-g$g"
  run_group "$g" "$gdir" $share &
done
wait
pkill -9 -f "[s]ervices.worker.evaluator.rank" 2>/dev/null
for g in $(seq 1 $((groups - 1))); do
  [ -d "$dir-g$g/jobs" ] && { mkdir -p "$dir/jobs"; for j in "$dir-g$g"/jobs/*; do rm -rf "$dir/jobs/$(basename "$j")"; mv "$j" "$dir/jobs/"; done; }
  rm -rf "$dir-g$g"
done
python3 -m kloom.cli bench report "$dir" > "$OUT/report-ws${ws}.txt" 2>&1
tail -30 "$OUT/report-ws${ws}.txt"
tar czf "$OUT/pkb-ws${ws}.tgz" "$dir"
echo "done after ${SECONDS} s"
