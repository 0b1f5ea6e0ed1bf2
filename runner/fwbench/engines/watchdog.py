"""`python -m fwbench.engines.watchdog RUNNER_PID TOKEN`: removes a docker cell's container when the runner
that started it dies first.

The Docker daemon, not the runner, is a container's parent, so a runner killed with SIGKILL would leave
its cell running (competing with the next run's timings) and writing a record nobody reads. The docker
engine starts this watchdog in its own session before it creates a container, and labels the container with
the watchdog's token (WATCHDOG_LABEL): there is no moment at which a container exists that nothing would
remove. The engine stops the watchdog once it has removed the container itself.
"""

from __future__ import annotations

import sys
import time

from fwbench.core.processes import alive
from fwbench.engines.docker_client import docker_client

POLL_S = 0.2
WATCHDOG_LABEL = "io.fwbench.watchdog-token"


def remove_containers(client, token: str) -> int:
    """Force-remove every container (running or not) labelled with this token; how many there were."""
    import docker

    found = client.containers.list(all=True, filters={"label": f"{WATCHDOG_LABEL}={token}"},
                                   ignore_removed=True)  # one may go (--rm) between the list and its inspect
    for container in found:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
    return len(found)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        print("usage: python -m fwbench.engines.watchdog RUNNER_PID TOKEN", file=sys.stderr)
        return 2
    runner_pid, token = int(argv[0]), argv[1]
    client = docker_client()
    while alive(runner_pid):
        time.sleep(POLL_S)
    remove_containers(client, token)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
