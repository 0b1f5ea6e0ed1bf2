"""Image size vs the installed size of the stack's own wheels (target: image <= 1.15 x wheels).

    python benchmarks/image_sizes.py [--variant cpu]

Needs a Docker engine and the built images (docker compose -f compose.cpu.yaml build). Prints a
Markdown table: image size (as `docker image ls` counts it), installed size of the lock file's packages
(the venv's site-packages), and their ratio; the difference is the OS, Python, compiler and fwbench.
"""

from __future__ import annotations

import argparse
import sys

STACKS = ("native-torch", "keras3-tensorflow", "keras3-jax", "keras3-torch", "keras2-tensorflow")
TARGET_RATIO = 1.15


def gb(n_bytes: int) -> str:
    return f"{n_bytes / 1e9:.2f} GB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="cpu")
    parser.add_argument("--pin-set", default="current")
    args = parser.parse_args()
    import docker

    client = docker.from_env()
    print("| image | image size | installed wheels | ratio |")
    print("|---|---|---|---|")
    worst = 0.0
    for stack in STACKS:
        name = f"fwbench/{stack}:{args.pin_set}-{args.variant}"
        try:
            image = client.images.get(name)
        except docker.errors.ImageNotFound:
            print(f"| `{name}` | not built | | |")
            continue
        output = client.containers.run(
            image.id, entrypoint=["python", "-c"], remove=True,
            command=["import sysconfig, subprocess; "
                     "print(subprocess.check_output(['du', '-sb', sysconfig.get_paths()['purelib']]).split()[0].decode())"])
        wheels = int(output.decode().strip())
        ratio = image.attrs["Size"] / wheels
        worst = max(worst, ratio)
        print(f"| `{name}` | {gb(image.attrs['Size'])} | {gb(wheels)} | {ratio:.2f} |")
    print(f"\nworst ratio {worst:.2f} (target <= {TARGET_RATIO})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
