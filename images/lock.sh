#!/usr/bin/env bash
# Regenerate images/<stack>/<pin-set>/requirements-<variant>.lock (fully pinned, with SHA-256 hashes) from
#   cpu: images/<stack>/<pin-set>/requirements.txt      (also what the local engine installs off Linux x86_64)
#   gpu: images/<stack>/<pin-set>/requirements-gpu.txt  (CUDA wheels; without it, the cpu input: PyPI's torch
#        wheels are CUDA builds that also run on the CPU)
# plus images/fwbench-runtime.txt, constrained by images/pin-sets/<pin-set>.txt (versions shared by every
# stack of the pin set); the pin set's overrides.txt wins over all of them (uv --override: e.g. keras
# 3.0.5 over TensorFlow 2.15, as the published setup installed it). Resolved against PyPI for Linux
# x86_64, CPython 3.11. Usage: bash images/lock.sh [stack[/pin-set] ...]   (default: all of them)
set -euo pipefail
cd "$(dirname "$0")"
tools="$(mktemp -d)"; trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools/venv" && "$tools/venv/bin/pip" install -q uv==0.13.9
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for dir in */*/requirements.txt; do targets+=("$(dirname "$dir")"); done
fi
for target in "${targets[@]}"; do
  if [ -f "$target/requirements.txt" ]; then dirs=("$target"); else dirs=("$target"/*/); fi
  for dir in "${dirs[@]}"; do
    dir="${dir%/}"
    [ -f "$dir/requirements.txt" ] || { echo "lock.sh: no $dir/requirements.txt" >&2; exit 2; }
    variants=(cpu gpu); [ "${dir%%/*}" = runner ] && variants=(cpu)  # the runner has no framework
    for variant in "${variants[@]}"; do
      input="$dir/requirements.txt"; [ "$variant" = gpu ] && [ -f "$dir/requirements-gpu.txt" ] && input="$dir/requirements-gpu.txt"
      overrides=(); [ -f "$dir/overrides.txt" ] && overrides=(--override "$dir/overrides.txt")
      constraints=(); pin_set="${dir#*/}"; [ -f "pin-sets/$pin_set.txt" ] && constraints=(--constraint "pin-sets/$pin_set.txt")
      "$tools/venv/bin/uv" pip compile --quiet --generate-hashes --no-header --index-url https://pypi.org/simple \
        --python-version 3.11 --python-platform x86_64-manylinux_2_28 "${overrides[@]}" "${constraints[@]}" \
        "$input" fwbench-runtime.txt -o "$dir/requirements-$variant.lock"
      echo "locked $dir/requirements-$variant.lock ($(grep -c '^[a-zA-Z]' "$dir/requirements-$variant.lock") packages)"
    done
  done
done
