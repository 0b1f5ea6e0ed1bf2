"""`fwbench verify` overhead: everything but the re-runs (signature, pull by digest, image checks, comparison,
report), with the images already local. Target: under 60 s.

    python benchmarks/verify_overhead.py [--pin-set current] [--stack keras3-jax] [--task bert-predict]

Needs a Docker engine, Debian's docker-registry and the stack's CPU image (docker compose -f compose.cpu.yaml
build bench-jax). Starts a registry on a free 127.0.0.1 port, publishes the image (signed with a throwaway key),
runs one tiny cell by digest, bundles it, then runs `fwbench verify` --rounds times and prints the time of each
phase from verify's own `timing:` line (median over rounds) and the whole command's wall time. --json FILE also
writes them with the date, machine, command and commit (benchmarks/measurement_log.py).
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 60.0


def fwbench(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "fwbench.cli", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"fwbench {args[0]} failed:\n{done.stderr[-2000:]}")
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pin-set", default="current")
    parser.add_argument("--stack", default="keras3-jax")
    parser.add_argument("--task", default="bert-predict")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here (their place: benchmarks/results/"
                        "<date>-<machine>/verify-overhead.json)")
    args = parser.parse_args()
    import measurement_log

    started = measurement_log.now()
    if not shutil.which("docker-registry"):
        sys.exit("needs Debian's docker-registry (apt-get install docker-registry)")
    with tempfile.TemporaryDirectory(prefix="fwbench-verify-bench-") as tmp:
        work = Path(tmp)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        (work / "config.yml").write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {work / 'reg'}\n"
                                         f"http:\n  addr: 127.0.0.1:{port}\n")
        registry = subprocess.Popen(["docker-registry", "serve", str(work / "config.yml")],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1)
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / "key")], check=True)
            (work / "allowed").write_text(f"bench {(work / 'key.pub').read_text()}")
            fwbench("publish", "--registry", f"127.0.0.1:{port}", "--pin-set", args.pin_set, "--variant", "cpu",
                    "--stack", args.stack, "--sign-key", str(work / "key"), "--out", str(work / "release"))
            fwbench("run", "--engine", "docker", "--release", str(work / "release" / "release.json"), "--pin-set",
                    args.pin_set, "--stack", args.stack, "--task", args.task, "--preset", "tiny", "--steps", "5",
                    "--repeats", "3", "--data", str(work / "data"), "--out", str(work / "results"))
            fwbench("bundle", str(work / "results"), "--release", str(work / "release" / "release.json"),
                    "-o", str(work / "bundle.tar.gz"), "--sign-key", str(work / "key"))
            phases: dict[str, list[float]] = {}
            walls = []
            for round_index in range(args.rounds):
                started = time.perf_counter()
                # Timing only: tiny cells may honestly be inconclusive at 3 repeats, which must not stop the bench.
                done = fwbench("verify", str(work / "bundle.tar.gz"), "--allowed-signers", str(work / "allowed"),
                               "--repeats", "3", "--allow-inconclusive", "--out", str(work / f"verify-{round_index}"))
                walls.append(time.perf_counter() - started)
                line = next(l for l in done.stderr.splitlines() if l.startswith("timing:"))
                for name, value in re.findall(r"(\w+)=([\d.]+)", line):
                    phases.setdefault(name, []).append(float(value))
        finally:
            registry.terminate()
            registry.wait()
    medians = {name: statistics.median(values) for name, values in phases.items()}
    overhead = medians["checks_s"] + medians["compare_report_s"]
    wall = statistics.median(walls)
    print(f"verify {args.stack} {args.pin_set} ({args.task}, tiny), median of {args.rounds} rounds:")
    for name, value in medians.items():
        print(f"  {name:<18} {value:7.2f} s")
    print(f"  whole command      {wall:7.2f} s (includes interpreter start-up)")
    print(f"overhead (everything but re-running cells): {overhead:.2f} s, "
          f"{wall - medians['reruns_s']:.2f} s with start-up; target < {TARGET_S:g} s: "
          f"{'met' if wall - medians['reruns_s'] < TARGET_S else 'MISSED'}")
    if args.json:
        measurement_log.write(args.json, measurement_log.record(
            "verify_overhead.py", [{"phase": name, "median_s": value} for name, value in medians.items()],
            started=started, target=f"under {TARGET_S:g} s",
            settings={"pin set": args.pin_set, "stack": args.stack, "task": args.task, "rounds": args.rounds},
            figures=[["verify's time besides re-running cells (s)", overhead, ".2f"],
                     ["the same with the interpreter's start-up (s)", wall - medians["reruns_s"], ".2f"],
                     ["the whole command (s)", wall, ".2f"]]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
