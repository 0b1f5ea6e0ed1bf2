#!/usr/bin/env bash
# Prove that a stack's GPU image builds and runs: build fwbench/<stack>:<pin-set>-gpu, run one tiny cell in it
# on the CPU through fwbench's docker engine (the CUDA wheels fall back to the CPU), check its row, then remove
# the image and the build cache (a GPU image is 5-10 GB). Run it for every GPU lock a change touches:
#   bash images/check-gpu-image.sh STACK PIN_SET           one image
#   bash images/check-gpu-image.sh --changed-since REV     every stack x pin set whose GPU lock changed since REV
# Needs a Docker engine and fwbench on the host (FWBENCH_PYTHON: the interpreter that has it, default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
python="${FWBENCH_PYTHON:-python3}"
usage="usage: bash images/check-gpu-image.sh STACK PIN_SET | --changed-since REV"
targets=()
if [ "${1:-}" = --changed-since ]; then
  [ $# -eq 2 ] || { echo "$usage" >&2; exit 2; }
  while read -r lock; do
    [ -n "$lock" ] && [ -f "$lock" ] && targets+=("$(cut -d/ -f2 <<<"$lock") $(cut -d/ -f3 <<<"$lock")")
  done < <(git diff --name-only "$2" -- 'images/*/*/requirements-gpu.lock')
  [ ${#targets[@]} -gt 0 ] || { echo "check-gpu-image: no GPU lock changed since $2"; exit 0; }
else
  [ $# -eq 2 ] || { echo "$usage" >&2; exit 2; }
  [ -f "images/$1/$2/requirements-gpu.lock" ] || { echo "check-gpu-image: no images/$1/$2/requirements-gpu.lock" >&2; exit 2; }
  targets=("$1 $2")
fi

# images/Dockerfile needs BuildKit (buildx, or DOCKER_BUILDKIT=1 with a 20.10 CLI); else its classic twin.
dockerfile="${FWBENCH_DOCKERFILE:-}"
if [ -z "$dockerfile" ]; then
  if [ "${DOCKER_BUILDKIT:-}" = 1 ] || docker buildx version >/dev/null 2>&1; then dockerfile=images/Dockerfile
  else dockerfile=images/Dockerfile.classic; fi
fi
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
"$python" -m fwbench.cli data --preset tiny --out "$work/data" >/dev/null
for target in "${targets[@]}"; do
  read -r stack pin_set <<<"$target"
  image="fwbench/$stack:$pin_set-gpu"
  echo "== check-gpu-image: $image ($dockerfile)"
  start=$(date +%s)
  docker build -q --force-rm -f "$dockerfile" --build-arg STACK="$stack" --build-arg PIN_SET="$pin_set" --build-arg VARIANT=gpu \
    --build-arg GIT_REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
    ${FWBENCH_BASE_IMAGE:+--build-arg FWBENCH_BASE_IMAGE="$FWBENCH_BASE_IMAGE"} -t "$image" . >/dev/null
  echo "built in $(( $(date +%s) - start )) s, $(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.2f GB", $1/1e9}')"
  status=0
  "$python" -m fwbench.cli run --engine docker --device cpu --image "fwbench/{stack}:{pin_set}-gpu" --pin-set "$pin_set" \
    --stack "$stack" --task bert-predict --preset tiny --data "$work/data" --out "$work/results/$stack-$pin_set" || status=$?
  if [ "$status" = 0 ]; then
    "$python" - "$work/results/$stack-$pin_set" "$pin_set" <<'PY' || status=$?
import sys
from pathlib import Path

from fwbench.core import results

[row] = [results.read_row(p) for p in Path(sys.argv[1]).rglob("*.parquet")]
if (row["status"], row["image_variant"], row["pin_set"]) != ("ok", "gpu", sys.argv[2]):
    sys.exit(f"unexpected row: status {row['status']}, image {row['image_variant']}, pin set {row['pin_set']}")
# A GPU lock adds CUDA packages to the CPU one: they must not move a published pin without declaring it.
if sys.argv[2] == "paper-2024" and (not row["pin_deviations"] or "undeclared" in row["pin_deviations"]):
    sys.exit(f"undeclared differences from the published pins: {row['pin_deviations']}")
print(f"ok: {row['task']} ran in the gpu image on the CPU, {row['ms_per_step']:.1f} ms/step")
PY
  fi
  docker image rm -f "$image" >/dev/null  # with the classic builder, its intermediate layers go with it
  # BuildKit keeps a cache apart from images. Not pruned after a classic build, which left none: CI builds the CPU
  # images with BuildKit at the same time, and their shared uv cache must stay.
  [ "$dockerfile" = images/Dockerfile.classic ] || docker builder prune -af >/dev/null
  [ "$status" = 0 ] || { echo "check-gpu-image: $image FAILED" >&2; exit 1; }
done
