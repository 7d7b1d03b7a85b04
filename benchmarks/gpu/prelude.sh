# Sourced at the start of a device call: the carried wheels (SQLAlchemy and Alembic for the
# knowledge base: the GPU image has neither; see results/README.md), the environment of env.sh,
# and once per machine the NCCL-in-sandbox check, whose verdict later calls on a warm machine reuse.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if ls .whl/*.whl > /dev/null 2>&1 && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || echo "wheels did not install"
fi
[ -d /tmp/site ] && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
. benchmarks/gpu/env.sh
if [ ! -f /tmp/kloom-sandbox.verdict ]; then
  { nvidia-smi -L; nvidia-smi topo -m; python3 -c "import torch, triton, sqlalchemy; print('torch', torch.__version__, 'triton', triton.__version__, 'sqlalchemy', sqlalchemy.__version__)"; } > "$OUT/machine.txt" 2>&1
  timeout 400 python3 -m pytest -q -m gpu tests/evaluator/test_sandbox_nccl.py -p no:cacheprovider > "$OUT/sandbox.log" 2>&1
  if grep -q " passed" "$OUT/sandbox.log" && ! grep -q -E "[0-9]+ (failed|errors?)\b" "$OUT/sandbox.log"; then echo isolated > /tmp/kloom-sandbox.verdict; else echo open > /tmp/kloom-sandbox.verdict; fi
  echo "sandbox: $(cat /tmp/kloom-sandbox.verdict)"; tail -3 "$OUT/sandbox.log"
fi
# The rank sandbox's network namespace, where NCCL could not work in it (docs/reliability.md).
[ "$(cat /tmp/kloom-sandbox.verdict)" = open ] && export KLOOM_EVAL_ISOLATE_NETWORK=0
# What every call brings back: the results it wrote inside the working tree.
bring_back() { tar czf "$OUT/results.tgz" results benchmarks/results 2>/dev/null; }
