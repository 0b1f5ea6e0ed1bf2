#!/usr/bin/env bash
# The last install step of every fwbench image (run by the Dockerfiles, never on a host): install fwbench
# itself into the venv that already holds the stack's locked packages, write the image manifest
# (/opt/fwbench/manifest.json: pip freeze, lock-file hash, build args, git revision), add the user.
set -euo pipefail
root=/opt/fwbench
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
with open(f"{root}/manifest.json", "w") as f:
    f.write(json.dumps(manifest, indent=2) + "\n")
PY
useradd --uid 1000 --create-home --shell /usr/sbin/nologin fwbench
