#!/usr/bin/env bash
# Some KernelBench problems measured again (benchmarks/gpu/kernelbench.sh) after a change that
# concerns them only: their files are copied into a KernelBench folder of their own, which the
# runner then walks as it walks the whole split. Problems are named by their files, the way a
# person picks what to re-measure; kloom itself still sees only each workload.
#
#   bash benchmarks/gpu/kernelbench_subset.sh [resume folder] [max candidates] level1/1_ level2/29_ ...
#
# Each argument after the first two is a file-name prefix under KernelBench/ (level1/1_ picks
# level1/1_Square_matrix_multiplication_.py); they run in the order given. Carry .whl, .gpu and the resume folder; merge the
# call's partial.jsonl into the committed results with benchmarks/kernelbench_merge.py.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
RESUME="${1:-kb-resume}"
CANDIDATES="${2:-3}"
shift 2
SRC="${KB_SOURCE:-.gpu/third_party/kernelbench}/KernelBench"
SUB=/tmp/kloom-kb-subset
rm -rf "$SUB" && mkdir -p "$SUB/KernelBench"
for prefix in "$@"; do
  found=("$SRC/$prefix"*.py)
  if [ ! -f "${found[0]}" ]; then echo "no KernelBench file starts with $prefix" >&2; exit 2; fi
  if [ "${#found[@]}" -ne 1 ]; then echo "$prefix names ${#found[@]} files; give a longer prefix" >&2; exit 2; fi
  mkdir -p "$SUB/KernelBench/$(dirname "$prefix")" && cp "${found[0]}" "$SUB/KernelBench/$(dirname "$prefix")/"
done
echo "re-measuring $# problem(s), in this order: $*"
KB_FIRST="$(IFS=,; echo "$*")" bash benchmarks/gpu/kernelbench.sh "$RESUME" "$SUB" "$CANDIDATES"
