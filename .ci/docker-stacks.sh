#!/usr/bin/env bash
# Which stacks' CPU images a CI run builds and runs its Docker tests on, printed on one line. Building all five
# took most of CI's time (each image carries its framework's full wheels; 2268 s of a 3331 s run, 2026-11-27), so:
#   - keras3-jax always: Compose's bench-jax, publish/verify and the model-file tests run on it;
#   - every stack whose own files (images/<stack>/) the commit changed;
#   - all five when the commit changed what every image is built from (the Dockerfiles, the scripts they copy,
#     the Compose files, pyproject.toml), or when there is no parent commit to compare with;
#   - else one more, by rotation from the commit hash, so that successive runs cover every image (the GPU image
#     check rotates the same way).
# Usage: .ci/docker-stacks.sh [commit]   (default HEAD; run in the repository)
set -euo pipefail
source "$(dirname "$0")/image-inputs.sh"
commit="${1:-HEAD}"
others=(keras3-tensorflow keras3-torch keras2-tensorflow native-torch)
if ! changed="$(git diff --name-only "$commit^" "$commit" 2>/dev/null)"; then
  echo "keras3-jax ${others[*]}"; exit 0
fi
if grep -Eq "$SHARED_IMAGE_FILES" <<<"$changed"; then
  echo "keras3-jax ${others[*]}"; exit 0
fi
picked=(keras3-jax)
for stack in "${others[@]}"; do
  grep -q "^images/$stack/" <<<"$changed" && picked+=("$stack")
done
if [ "${#picked[@]}" = 1 ]; then
  hash="$(git rev-parse --short=7 "$commit")"
  picked+=("${others[$(( 16#$hash % ${#others[@]} ))]}")
fi
echo "${picked[*]}"
