#!/usr/bin/env bash
# KernelBench development split, levels 1 and 2, at the problems' own sizes on one GPU: per
# problem eager, torch.compile (default and max-autotune) and kloom offline (kloom's importer, the
# offline strategist, the real evaluator), with correctness, times, peak memory and job wall time
# (benchmarks/gpu/kernelbench_run.py). One call stays under 9 minutes; calls resume each other.
#
#   bash benchmarks/gpu/kernelbench.sh [resume folder] [KernelBench checkout] [max candidates]
#
# Resume: put the partial.jsonl of the previous call's $OUT into the resume folder (default
# kb-resume/, an ignored path: name it in the device call's carry) and call again; problems
# already there are not run again. $OUT receives: partial.jsonl (every problem so far: carry it
# back), report.md and report.json (benchmarks/kernelbench_report.py over it), run.log,
# problems.log.gz and jobs.tgz (each kloom job's trajectory), plus prelude.sh's machine.txt and
# sandbox.log on a fresh machine: 8 files at most.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/prelude.sh
RESUME="${1:-kb-resume}"
KB="${2:-shared/third_party/kernelbench}"
CANDIDATES="${3:-3}"
# KB_MODES=eager,default leaves max-autotune out (it compiles for minutes per problem).
MODES="${KB_MODES:-eager,default,max-autotune}"
# KB_FILL=max-autotune adds that mode to the problems measured without it, beside an eager time of
# its own, with no kloom job (kernelbench_run.py --fill); KB_FILL_TIMEOUT_S bounds each problem;
# KB_FILL_ELSEWHERE=1 measures again, on the rows' own machine, the entries taken on another one.
EXTRA=()
[ -n "${KB_FILL:-}" ] && EXTRA=(--fill "$KB_FILL" --fill-timeout-s "${KB_FILL_TIMEOUT_S:-150}")
[ -n "${KB_FILL:-}" ] && [ "${KB_FILL_ELSEWHERE:-0}" = 1 ] && EXTRA+=(--fill-elsewhere)
# KB_FIRST=level1/81_,level2/11_ runs those problems first, in that order (kernelbench_subset.sh sets it).
[ -n "${KB_FIRST:-}" ] && EXTRA+=(--first "$KB_FIRST")
DEVICE="${KB_DEVICE:-cuda}"  # cpu: a dry run of this script's logic on a machine without a GPU
LIMIT_S="${KLOOM_CALL_LIMIT_S:-540}"
# What is left of the call after the prelude, less a minute for the report and the packing.
BUDGET=$((LIMIT_S - SECONDS - 60))
WORK=/tmp/kloom-kernelbench
mkdir -p "$WORK"
RESUMES=()
for f in "$RESUME"/partial.jsonl "$RESUME"/*/partial.jsonl; do [ -f "$f" ] && RESUMES+=(--resume "$f"); done
echo "budget ${BUDGET} s after ${SECONDS} s of prelude; resuming from $((${#RESUMES[@]} / 2)) file(s)" | tee "$OUT/run.log"
if [ "$BUDGET" -gt 60 ]; then
  timeout $((BUDGET + 30)) python3 benchmarks/gpu/kernelbench_run.py --kernelbench "$KB" --out "$WORK" \
    "${RESUMES[@]}" --budget-s "$BUDGET" --max-candidates "$CANDIDATES" --modes "$MODES" --device "$DEVICE" "${EXTRA[@]}" 2>&1 | grep -v -i "warning" | tee -a "$OUT/run.log"
fi
cp "$WORK/partial.jsonl" "$OUT/partial.jsonl" 2>/dev/null
timeout 30 python3 benchmarks/kernelbench_report.py "$OUT/partial.jsonl" --out "$OUT" > /dev/null 2>> "$OUT/run.log"
gzip -c "$WORK/problems.log" > "$OUT/problems.log.gz" 2>/dev/null
tar czf "$OUT/jobs.tgz" -C "$WORK" jobs 2>/dev/null
echo "done after ${SECONDS} s" | tee -a "$OUT/run.log"
