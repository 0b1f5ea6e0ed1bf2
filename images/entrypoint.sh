#!/bin/sh
# ENTRYPOINT of every fwbench image (images/Dockerfile): `docker run IMAGE ARGS...` runs `fwbench ARGS...`.
# With no ARGS: the image's stack, its whole matrix at FWBENCH_PRESET, resuming into /results
# (what compose's bench services run); the runner image, which has no stack, prints the help.
set -eu
if [ "$#" -eq 0 ]; then
  if [ "${FWBENCH_STACK:-runner}" = runner ]; then
    set -- --help
  else
    set -- run --stack "$FWBENCH_STACK" --engine current --data /data --out /results --resume
  fi
fi
exec fwbench "$@"
