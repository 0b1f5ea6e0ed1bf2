#!/usr/bin/env bash
# Regenerate images/<stack>/requirements-<variant>.lock (fully pinned, with SHA-256 hashes) from
#   cpu: images/<stack>/requirements.txt      (also what the local engine installs)
#   gpu: images/<stack>/requirements-gpu.txt  (CUDA wheels)
# plus images/fwbench-runtime.txt (a stack's runtime-overrides.txt wins over it). Resolved against PyPI for Linux x86_64, CPython 3.11.
# Usage: bash images/lock.sh [stack ...]
set -euo pipefail
cd "$(dirname "$0")"
tools="$(mktemp -d)"; trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools/venv" && "$tools/venv/bin/pip" install -q uv==0.13.9
stacks=("$@"); [ ${#stacks[@]} -gt 0 ] || stacks=(native-torch keras3-tensorflow keras3-jax keras3-torch keras2-tensorflow runner)
for stack in "${stacks[@]}"; do
  for variant in cpu gpu; do
    input="$stack/requirements.txt"; [ "$variant" = gpu ] && input="$stack/requirements-gpu.txt"
    [ -f "$input" ] || { echo "skip $stack/$variant: no $input"; continue; }
    # A stack may override fwbench-runtime.txt's pins (e.g. keras2-tensorflow: numpy 1.26 needs an older pyarrow).
    overrides=(); [ -f "$stack/runtime-overrides.txt" ] && overrides=(--override "$stack/runtime-overrides.txt")
    "$tools/venv/bin/uv" pip compile --quiet --generate-hashes --no-header --index-url https://pypi.org/simple \
      --python-version 3.11 --python-platform x86_64-manylinux_2_28 "${overrides[@]}" \
      "$input" fwbench-runtime.txt -o "$stack/requirements-$variant.lock"
    echo "locked $stack/requirements-$variant.lock ($(grep -c '^[a-zA-Z]' "$stack/requirements-$variant.lock") packages)"
  done
done
