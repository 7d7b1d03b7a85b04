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
# finished jobs: they are not redone. $OUT receives the batch as pkb-ws<N>.tgz, the log and the
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
export PYTHONFAULTHANDLER=1
end=$((SECONDS + left))
for w in $(ls "$suite" | grep '\.py$' | sed 's/\.py$//' | sort -t_ -k2 -n); do
  rest=$((end - SECONDS)); [ "$rest" -gt 20 ] || { echo "out of time before $w"; break; }
  timeout -s INT "$rest" python3 -m kloom.cli "${args[@]}" -w "$w" 2>&1 | tee -a "$OUT/pkb-ws${ws}.log" | grep -E "^(start|pkb_|Fatal|free|Segm|Abort)|Error" | grep -v -i warning | tail -6
  pkill -9 -f "[s]ervices.worker.evaluator.rank" 2>/dev/null
done
python3 -m kloom.cli bench report "$dir" > "$OUT/report-ws${ws}.txt" 2>&1
tail -30 "$OUT/report-ws${ws}.txt"
tar czf "$OUT/pkb-ws${ws}.tgz" "$dir"
echo "done after ${SECONDS} s"
