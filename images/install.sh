#!/usr/bin/env bash
# Shared install steps of every fwbench stack image (run by the Dockerfiles, never on a host).
#   install.sh deps     create the venv and install the stack's lock file (hash-checked)
#   install.sh fwbench  install fwbench itself, write the image manifest, add the non-root user
set -euo pipefail
root=/opt/fwbench
case "$1" in
  deps)
    python3 -m venv "$VIRTUAL_ENV"
    pip install --no-cache-dir --no-deps --require-hashes -r "$root/requirements.lock"
    ;;
  fwbench)
    # --no-deps: everything fwbench needs at run time is already in the lock file.
    pip install --no-cache-dir --no-deps --no-build-isolation "$root/src"
    rm -rf "$root/src"
    pip freeze --all > "$root/pip-freeze.txt"
    python3 - <<PY
import json, hashlib, platform
root = "$root"
manifest = {
    "stack": "$FWBENCH_STACK", "variant": "$FWBENCH_VARIANT", "pin_set": "$FWBENCH_PIN_SET",
    "git_revision": "$FWBENCH_GIT_REVISION", "base_image": "$FWBENCH_BASE_IMAGE",
    "python": platform.python_version(),
    "lock_sha256": hashlib.sha256(open(f"{root}/requirements.lock", "rb").read()).hexdigest(),
    "pip_freeze": open(f"{root}/pip-freeze.txt").read().split(),
}
json.dump(manifest, open(f"{root}/manifest.json", "w"), indent=2)
PY
    useradd --uid 1000 --create-home --shell /usr/sbin/nologin fwbench
    ;;
  *) echo "usage: install.sh deps|fwbench" >&2; exit 2 ;;
esac
