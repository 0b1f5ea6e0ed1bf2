"""The one way fwbench reaches the Docker engine."""

from __future__ import annotations

# docker-py gives up on an answer after 60 s. In CI, a daemon busy committing a multi-GB image layer beside a
# loaded 2-core host answered an inspect later than that, and the timed-out cell was lost (no row). A slow answer
# is not a failure: wait longer (a real hang still ends, in the cell's own timeout or this one).
API_TIMEOUT_S = 600


def docker_client():
    import docker

    return docker.from_env(timeout=API_TIMEOUT_S)
