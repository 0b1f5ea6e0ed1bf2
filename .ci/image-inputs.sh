# Sourced by .ci/docker-stacks.sh and .ci/gpu-image.sh: the files every image is built from (the Dockerfiles, the
# scripts and lists they copy, the Compose files, pyproject.toml), as a regular expression over changed paths.
# shellcheck disable=SC2034
SHARED_IMAGE_FILES='^(images/(Dockerfile|Dockerfile\.classic|install\.sh|entrypoint\.sh|sbom\.py|fwbench-runtime\.txt|compose\.services\.yaml|tools/)|compose(\.cpu)?\.yaml$|pyproject\.toml$)'
