#!/usr/bin/env bash
# The test command (README "Run the tests"): installs what the tests need on a fresh machine, then pytest.
# Stack environments are built by the tests themselves on first use (cached in $FWBENCH_HOME or
# ~/.cache/fwbench). Extra arguments go to pytest, e.g. `bash tests/run.sh -m "not integration"`.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
  # The report test renders report.html in headless Chromium (Debian's package).
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "note: chromium not installed; the HTML screenshot test will be skipped" >&2
  fi
fi

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  # The Slurm test starts a one-node cluster on localhost (Debian's slurm-wlm and munge; root only).
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
  else
    echo "note: slurm-wlm/munge not installed (or not root); the Slurm cluster test will be skipped" >&2
  fi
fi

# Created once: a later run reuses it (re-running venv could re-point it at another python3 on PATH).
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[report,test,docs]'
exec .venv/bin/python -m pytest -ra "$@"
