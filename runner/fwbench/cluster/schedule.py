"""A nightly `fwbench watch`, as the schedulers people already run express it (`fwbench watch --schedule KIND`): a
cron line or a systemd timer on one machine, a Kubernetes CronJob (its pod as `fwbench k8s render`'s Jobs have
it), a Slurm scrontab entry (placed as `fwbench slurm submit`'s tasks are). Nothing here schedules anything: each
renders text for the user to install.

Every entry runs the same watch command (`argv`, the arguments after `fwbench`) once a day at `at` (HH:MM, the
scheduler's local time), never two at once (flock, Forbid, or scrontab's one job per entry), and keeps its output.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from fwbench.cluster import k8s
from fwbench.cluster.slurm import SlurmOptions, placement_flags

KINDS = ("cron", "systemd", "k8s", "slurm")
_AT = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


def parse_at(at: str) -> tuple[int, int]:
    """'03:00' -> (3, 0); ValueError with one line otherwise."""
    match = _AT.match(at.strip())
    if not match:
        raise ValueError(f"--at must be HH:MM (24-hour), got {at!r}")
    return int(match.group(1)), int(match.group(2))


def _cron_time(at: str) -> str:
    hour, minute = parse_at(at)
    return f"{minute} {hour} * * *"


def cron_line(argv: list[str], at: str, *, fwbench: list[str], workdir: Path, log: Path) -> str:
    """A crontab line: the watch in `workdir`, output appended to `log`, skipped while the last one still runs."""
    command = shlex.join(["flock", "-n", str(workdir / ".fwbench-watch.lock"), *fwbench, *argv])
    return f"{_cron_time(at)} cd {shlex.quote(str(workdir))} && {command} >> {shlex.quote(str(log))} 2>&1"


def systemd_units(argv: list[str], at: str, *, fwbench: list[str], workdir: Path, name: str = "fwbench-watch") -> str:
    """A oneshot service and its daily timer (a user unit: ~/.config/systemd/user/), output to the journal."""
    hour, minute = parse_at(at)
    return "\n".join([
        f"# ~/.config/systemd/user/{name}.service",
        "[Unit]", "Description=fwbench watch (a benchmark's results history, checked against new releases)", "",
        "[Service]", "Type=oneshot", f"WorkingDirectory={workdir}", f"ExecStart={shlex.join([*fwbench, *argv])}",
        # Exit 3 is "a change was found": a finding, not a failure of the unit.
        "SuccessExitStatus=3", "",
        f"# ~/.config/systemd/user/{name}.timer",
        "[Unit]", f"Description=Run {name} daily", "",
        "[Timer]", f"OnCalendar=*-*-* {hour:02d}:{minute:02d}:00", "Persistent=true", "",
        "[Install]", "WantedBy=timers.target", "",
        f"# then: systemctl --user daemon-reload && systemctl --user enable --now {name}.timer", ""])


def k8s_cronjob(argv: list[str], at: str, *, image: str, results_claim: str, namespace: str | None,
                resources: k8s.PodResources, prefix: str = "fwbench") -> dict:
    """A CronJob whose pod is `fwbench k8s render`'s (security context, resources, scratch volumes, the results
    claim), running the watch instead of a planned cell. The watch installs each release it measures from the
    package index, so unlike render's cells it needs egress to the index: no deny-all NetworkPolicy here."""
    resources.check()
    job = k8s.indexed_job(prefix, "watch", image, 1, 1, results_claim=results_claim, gpu=False, namespace=namespace,
                          resources=resources, backoff_limit=0)
    pod = job["spec"]["template"]
    container = pod["spec"]["containers"][0]
    container.update(name="watch", args=list(argv))
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "plan"]
    container["env"] = [*container["env"], {"name": "FWBENCH_HOME", "value": "/results/.fwbench"}]
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] != "plan"]
    return {
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": k8s.object_name(prefix, "watch"), **({"namespace": namespace} if namespace else {}),
                     "labels": dict(pod["metadata"]["labels"])},
        "spec": {"schedule": _cron_time(at), "concurrencyPolicy": "Forbid", "successfulJobsHistoryLimit": 7,
                 "failedJobsHistoryLimit": 7,
                 "jobTemplate": {"spec": {"backoffLimit": 0, "template": pod}}},
    }


def scrontab_entry(argv: list[str], at: str, *, fwbench: list[str], workdir: Path, options: SlurmOptions) -> str:
    """A Slurm scrontab entry (`scrontab -e`): #SCRON lines with the placement `fwbench slurm submit` gives its
    tasks, then the cron line; Slurm runs one job of an entry at a time."""
    lines = ["#SCRON --job-name=fwbench-watch", f"#SCRON --cpus-per-task={options.cpus_per_task}",
             f"#SCRON --time={options.time_limit}", f"#SCRON --chdir={workdir}",
             f"#SCRON --output={workdir / 'fwbench-watch-%j.out'}"]
    lines += [f"#SCRON {flag}" for flag in placement_flags(options)]
    if options.mem:
        lines.append(f"#SCRON --mem={options.mem}")
    lines.append(f"{_cron_time(at)} {shlex.join([*fwbench, *argv])}")
    return "\n".join(lines) + "\n"
