#!/bin/sh
# ENTRYPOINT of every fwbench image (images/Dockerfile): `docker run IMAGE ARGS...` runs `fwbench ARGS...`.
# With no ARGS: the image's stack, its whole matrix at FWBENCH_PRESET, resuming into /results (what compose's bench
# services run); the runner image, which has no stack, prints the help. With FWBENCH_MODEL set (a model file in the
# container, e.g. /models/my_model.py: compose's bench services mount FWBENCH_MODELS there), a `run` runs that file's
# cells: `--model FILE` goes first among its options (docs/your-model.md).
set -eu
if [ "$#" -eq 0 ]; then
  if [ "${FWBENCH_STACK:-runner}" = runner ]; then
    set -- --help
  else
    set -- run --stack "$FWBENCH_STACK" --engine current --data /data --out /results --resume
  fi
fi
if [ -n "${FWBENCH_MODEL:-}" ] && [ "$1" = run ]; then
  shift
  set -- run --model "$FWBENCH_MODEL" "$@"
fi
exec fwbench "$@"
