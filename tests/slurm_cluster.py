"""A real one-node Slurm cluster on localhost for tests: munged, slurmctld and slurmd, isolated from /etc.

Everything lives in one work folder: its own munge key and socket, slurm.conf, state, spool, pid and log
files, and free TCP ports, so it neither reads nor disturbs a system Slurm or munge. Needs root and Debian's
slurm-wlm and munge packages.

    with one_node_cluster(tmp_path) as cluster:
        done = cluster.run("sbatch", "--parsable", "--wrap", "true")

slurmd runs in a mount namespace of its own in which `cluster.node_private` is an empty tmpfs: what a
folder local to the submitter (a login node's /tmp) looks like from a compute node. The same namespace
finds every job process at shutdown, so none is left behind.

Timing on this kind of machine (2 cores): start about 1.5 s; stop 0.1 s, or KillWait (5 s) more when a job
is still running and ignores SIGTERM. slurmctld checks time limits and --signal warnings only every 30 s.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PARTITION = "debug"
KILL_WAIT_S = 5
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 15
_NEEDED = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "sinfo", "scontrol",
           "unshare")


def _which(name: str) -> str | None:
    # The daemons are in /usr/sbin, which a non-login shell (or CI) may not have on PATH.
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def slurm_available() -> str | None:
    """None if one_node_cluster can run here, else a one-line reason (for pytest.skip)."""
    missing = [name for name in _NEEDED if _which(name) is None]
    if missing:
        return f"Slurm/munge not installed (no {', '.join(missing)}; Debian: apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "a local Slurm cluster needs root (munged, slurmctld and slurmd run as root)"
    return None


@dataclass
class SlurmCluster:
    env: dict[str, str]  # what a client subprocess needs: SLURM_CONF, and PATH as it was
    partition: str  # the default partition, the only one
    node: str  # the node's name (this host's short name), also SlurmctldHost
    node_private: Path  # a folder that slurmd and its jobs see as an empty tmpfs
    workdir: Path
    start_s: float = 0.0  # how long the start took
    stop_s: float = 0.0  # how long the stop took (set when the context ends)

    def run(self, *argv: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        """A Slurm client command (sbatch, squeue, ...) against this cluster, text output captured; does not
        raise on a non-zero exit. env=... adds to the environment."""
        env = {**os.environ, **self.env, **kw.pop("env", {})}
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env, **kw)

    def logs(self, lines: int = 30) -> str:
        """The last lines of each daemon's log, for a failure message."""
        parts = []
        for log in sorted((self.workdir / "log").iterdir()):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name} ---\n" + "\n".join(tail))
        return "\n".join(parts)


def _free_ports(count: int) -> list[int]:
    # Bound at once so the ports differ; released just before the daemons bind them (a small race we accept).
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _node_hardware() -> str:
    # What slurmd itself detects: a node configured with more CPUs or memory than that is drained (INVAL).
    line = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout.split("\n")[0]
    fields = dict(item.split("=", 1) for item in line.split())
    return " ".join(f"{key}={fields[key]}" for key in
                    ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory"))


def _slurm_conf(work: Path, node: str, ctld_port: int, slurmd_port: int) -> str:
    return f"""\
ClusterName=fwbench-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
# Our own munged, not /run/munge: auth/munge and cred/munge both read the socket from AuthInfo.
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={work}/munge/munge.socket
StateSaveLocation={work}/state
SlurmdSpoolDir={work}/spool
SlurmctldPidFile={work}/run/slurmctld.pid
SlurmdPidFile={work}/run/slurmd.pid
SlurmctldLogFile={work}/log/slurmctld.log
SlurmdLogFile={work}/log/slurmd.log
# Not /etc/slurm/plugstack.conf (the host's SPANK plugins).
PlugStackConfig={work}/plugstack.conf
MailProg=/bin/true
# No cgroup delegation in a container: follow job processes through /proc, bind nothing, gather nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
# One job per core: two 1-CPU array tasks run at once on a 2-core node.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# A stopped job gets SIGTERM, then SIGKILL {KILL_WAIT_S} s later; a time limit is not extended.
KillWait={KILL_WAIT_S}
OverTimeLimit=0
InactiveLimit=0
# Finished jobs stay in squeue's/scontrol's memory this long (Slurm's default; no accounting to ask after).
MinJobAge=300
JobRequeue=0
ReturnToService=2
NodeName={node} NodeAddr=127.0.0.1 {_node_hardware()} State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _mount_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:  # gone, or a zombie
        return None


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)


def _kill_namespace(namespace: str) -> None:
    """SIGKILL whatever is left in the node's mount namespace: slurmstepd and job processes."""
    for _ in range(100):
        left = [int(p) for p in os.listdir("/proc") if p.isdigit() and _mount_ns(int(p)) == namespace]
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    raise RuntimeError(f"processes of the Slurm node would not die: {left}")


@contextlib.contextmanager
def one_node_cluster(workdir: Path) -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and slurmd in workdir; yield once the node is idle; stop all of them after,
    cancelling and killing whatever job still runs."""
    reason = slurm_available()
    if reason:
        raise RuntimeError(reason)
    started = time.monotonic()
    work = Path(workdir).resolve()
    for sub in ("munge", "state", "spool", "run", "log", "node-private"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    node = socket.gethostname().split(".")[0]
    conf = work / "slurm.conf"
    conf.write_text(_slurm_conf(work, node, *_free_ports(2)))
    (work / "plugstack.conf").write_text("")
    key = work / "munge" / "munge.key"
    if not key.exists():
        subprocess.run([_which("mungekey"), "--create", f"--keyfile={key}"], check=True, capture_output=True)
    key.chmod(0o400)
    cluster = SlurmCluster(env={"SLURM_CONF": str(conf), "PATH": os.environ.get("PATH", os.defpath)},
                           partition=PARTITION, node=node, node_private=work / "node-private", workdir=work)
    procs: dict[str, subprocess.Popen] = {}

    def start(name: str, argv: list[str]) -> None:
        # In the foreground (-F/-D) as our children, so we hold their pids and can wait for them; in a
        # session of their own so a Ctrl-C reaches pytest (which stops them) and not them mid-test.
        with open(work / "log" / f"{name}.stderr", "ab") as err:
            procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                           env={**os.environ, **cluster.env}, start_new_session=True)

    def wait(what: str, ready) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            dead = [f"{name} exited with {p.returncode}" for name, p in procs.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = "; ".join(dead) or f"not within {START_TIMEOUT_S} s"
                raise RuntimeError(f"local Slurm cluster: waiting for {what}: {why}\n{cluster.logs()}")
            time.sleep(0.2)

    node_ns = None
    try:
        # --force: munged wants every folder above its socket open to all, and pytest's tmp folders are 0700.
        start("munged", [_which("munged"), "--foreground", "--force", f"--socket={work}/munge/munge.socket",
                         f"--key-file={key}", f"--pid-file={work}/run/munged.pid",
                         f"--log-file={work}/log/munged.log", f"--seed-file={work}/munge/munged.seed"])
        wait("munged's socket", (work / "munge" / "munge.socket").exists)
        start("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(conf)])  # -i: ignore stale state
        start("slurmd", [_which("unshare"), "--mount", "--propagation=private", "sh", "-c",
                         'mount -t tmpfs -o size=64m,mode=0755 node-private "$0" && exec "$@"',
                         str(cluster.node_private), _which("slurmd"), "-D", "-f", str(conf), "-N", node])
        wait(f"node {node} to be idle", lambda: cluster.run(
            "sinfo", "--noheader", f"--nodes={node}", "--format=%T", timeout=20).stdout.strip() == "idle")
        node_ns = _mount_ns(procs["slurmd"].pid)
        cluster.start_s = time.monotonic() - started
        yield cluster
    finally:
        stopping = time.monotonic()
        if "slurmd" in procs and node_ns is None:
            node_ns = _mount_ns(procs["slurmd"].pid)
        if all(name in procs and procs[name].poll() is None for name in ("munged", "slurmctld", "slurmd")):
            # Let Slurm end what still runs, its own way (SIGTERM, KillWait, SIGKILL), so nothing is orphaned.
            cluster.run("scancel", f"--partition={PARTITION}", timeout=20)
            deadline = time.monotonic() + KILL_WAIT_S + 10
            while time.monotonic() < deadline and cluster.run(
                    "squeue", "--noheader", "--states=RUNNING,COMPLETING", timeout=20).stdout.strip():
                time.sleep(0.2)
        for name in ("slurmd", "slurmctld", "munged"):
            if name in procs:
                _stop(procs[name])
        if node_ns and node_ns != _mount_ns(os.getpid()):
            _kill_namespace(node_ns)
        cluster.stop_s = time.monotonic() - stopping
