#!/usr/bin/env bash
# CI stand-in for the base image of images/Dockerfile. No image registry is reachable from CI, so the base
# (python:3.11-slim-bookworm by digest on users' machines) is made here: a debootstrapped Debian bookworm with
# python3, the host's CA bundle (so pip and apt inside builds can reach the package registries
# through this network), imported under the given name. Builds use it through the build argument
# FWBENCH_BASE_IMAGE (compose and images/check-gpu-image.sh pass it on when that variable is set);
# the Dockerfile itself is unchanged.
set -euo pipefail
BASE_IMAGE="${1:-fwbench-ci/python:3.11-slim-bookworm}"
if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  echo "base image $BASE_IMAGE already present"; exit 0
fi
rootfs="$(mktemp -d /tmp/fwbench-base.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
  bookworm "$rootfs" http://deb.debian.org/debian >/tmp/fwbench-debootstrap.log 2>&1 \
  || { tail -20 /tmp/fwbench-debootstrap.log; exit 1; }
cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
# The official image puts python on PATH as `python` too.
ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENV REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' - "$BASE_IMAGE"
echo "imported $BASE_IMAGE"
