# Sourced by every GPU script: NVLink multicast stays off on these shared hosts, output unbuffered,
# the repository importable, compiler caches inside the run's scratch space.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export KLOOM_CACHE_DIR="${KLOOM_CACHE_DIR:-/tmp/kloom-cache}"
export OUT="${OUT:-/tmp/kloom-out}"
mkdir -p "$OUT" "$KLOOM_CACHE_DIR"
kloom() { python3 -m kloom.cli "$@"; }
