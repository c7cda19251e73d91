#!/usr/bin/env bash
# Make requirements-lock.txt from requirements.txt: one exact version of every package, for every
# platform and Python from 3.10 on (uv's universal resolution, from PyPI only), within the upper bounds of
# tools/lock-constraints.txt. Run from anywhere; it installs uv into a throwaway environment.
#     bash tools/lock.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$(mktemp -d)/uv"
python3 -m venv "$venv" && "$venv/bin/python" -m pip install --quiet uv 2>/dev/null
{
  cat <<'HEADER'
# requirements-lock.txt: the exact versions the collection was tested with, for Linux, macOS and Windows,
# Python 3.10 and newer. Made from requirements.txt (the ranges, which Colab, Kaggle and conda users get)
# by `bash tools/lock.sh`, which runs
#   uv pip compile requirements.txt --universal --python-version 3.10 -c tools/lock-constraints.txt
# resolved from PyPI only. tools/lock-constraints.txt holds PyTorch at 2.14.1 and torchvision at 0.29.1,
# the newest the build machines' pip installs (from a local cache; it refuses newer ones). From PyPI,
# torch is the CUDA build on Linux and the CPU build elsewhere (README: Windows). Do not edit by hand.
HEADER
  "$venv/bin/uv" pip compile requirements.txt --universal --python-version 3.10 \
      -c tools/lock-constraints.txt --no-header --index-url https://pypi.org/simple
} > requirements-lock.txt.new
mv requirements-lock.txt.new requirements-lock.txt
rm -rf "$(dirname "$venv")"
echo "wrote requirements-lock.txt: $(grep -c '==' requirements-lock.txt) pins"
