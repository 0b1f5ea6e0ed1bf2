"""`python -m fwbench.engines.watchdog RUNNER_PID CONTAINER`: removes a docker cell's container when the
runner that started it dies first.

The Docker daemon, not the runner, is a container's parent, so a runner killed with SIGKILL would leave
its cell running (competing with the next run's timings) and writing a record nobody reads. The docker
engine starts this watchdog in its own session beside every container and stops it when the cell ends.
"""

from __future__ import annotations

import os
import sys
import time

POLL_S = 0.2
CONTAINER_CHECK_EVERY = 10  # polls: the container itself is checked every 2 s


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (dead, not yet reaped) is dead for our purpose.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        print("usage: python -m fwbench.engines.watchdog RUNNER_PID CONTAINER", file=sys.stderr)
        return 2
    runner_pid, container_id = int(argv[0]), argv[1]
    import docker

    client = docker.from_env()
    polls = 0
    while alive(runner_pid):
        time.sleep(POLL_S)
        polls += 1
        if polls % CONTAINER_CHECK_EVERY == 0:
            try:
                client.containers.get(container_id)
            except docker.errors.NotFound:
                return 0  # the cell ended and the runner removed it
    try:
        client.containers.get(container_id).remove(force=True)
    except docker.errors.NotFound:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
