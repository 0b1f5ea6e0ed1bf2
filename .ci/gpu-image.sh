#!/usr/bin/env bash
# Which GPU image a CI run builds and runs on the CPU (images/check-gpu-image.sh), printed as "LOCK WHY" on one
# line, or nothing. A GPU image is 5-10 GB of CUDA wheels: building one took about as long as the rest of CI's image
# work together and loaded the Docker engine for minutes (CI's `compose run` gave up waiting for it once), so a run
# builds one only where the commit can have changed what a GPU image is:
#   - a GPU lock the commit changed (the first in path order that it did not delete);
#   - else, where the commit changed what every image is built from (the Dockerfiles, the scripts they copy, the
#     Compose files, pyproject.toml), or there is no parent commit to compare with: one by rotation over every
#     stack x pin set, from the commit hash, so that successive such commits cover them all;
#   - else none: the locks pin every wheel by hash, so an unchanged image builds as it did.
# FWBENCH_CI_GPU_CHECK=1 asks for one by rotation whatever the commit changed.
# Usage: .ci/gpu-image.sh [commit]   (default HEAD; run in the repository)
set -euo pipefail
source "$(dirname "$0")/image-inputs.sh"
commit="${1:-HEAD}"
mapfile -t locks < <(ls images/*/*/requirements-gpu.lock | sort)
rotation() {
  local index=$(( 16#$(git rev-parse --short=7 "$commit") % ${#locks[@]} ))
  echo "${locks[$index]} $1, rotation ($((index + 1)) of ${#locks[@]})"
}
if ! changed="$(git diff --name-only "$commit^" "$commit" 2>/dev/null)"; then
  rotation "no parent commit"; exit 0
fi
# The first changed lock that still exists (one the commit deleted builds nothing).
lock=""
while read -r path; do
  if [ -f "$path" ]; then lock="$path"; break; fi
done < <(grep -E '^images/[^/]+/[^/]+/requirements-gpu\.lock$' <<<"$changed" | sort || true)
if [ -n "$lock" ]; then
  echo "$lock its lock changed in this commit"; exit 0
fi
if grep -Eq "$SHARED_IMAGE_FILES" <<<"$changed"; then
  rotation "what every image is built from changed"; exit 0
fi
if [ "${FWBENCH_CI_GPU_CHECK:-0}" = 1 ]; then
  rotation "FWBENCH_CI_GPU_CHECK=1"; exit 0
fi
