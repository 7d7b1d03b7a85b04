#!/usr/bin/env bash
# Run HERE (not on the device): litellm and its dependencies for the GPU image's Python 3.12, in
# one archive small enough to carry (.llm/site312.tar.xz, ~32 MB; the GPU image has no litellm).
# The proxy server's web UI is left out: kloom's client never loads it. Then, on the device,
# benchmarks/gpu/llm_gpu_test.sh (carry .llm).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
version=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('litellm'))")
tenacity=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('tenacity'))")
work=$(mktemp -d)
platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64)
.venv/bin/pip download -q --only-binary=:all: --python-version 3.12 "${platforms[@]}" -d "$work/wheels" "litellm==$version" "tenacity==$tenacity"
# Cloud SDKs and the Hugging Face hub: litellm imports them only for providers kloom does not call.
rm -f "$work"/wheels/{boto3,botocore,s3transfer,hf_xet,huggingface_hub,jmespath,fsspec,tqdm,tokenizers}-*.whl
.venv/bin/pip install -q --no-deps --no-compile --target "$work/site312" --python-version 3.12 --only-binary=:all: "${platforms[@]}" "$work"/wheels/*.whl
rm -rf "$work/site312/litellm/proxy/_experimental" "$work/site312/bin"
find "$work/site312" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p .llm && tar cJf .llm/site312.tar.xz -C "$work" site312
rm -rf "$work"
ls -la .llm/site312.tar.xz
