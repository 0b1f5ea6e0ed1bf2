"""`fwbench k8s render` (the plan as Kubernetes objects) and `fwbench k8s run-cell` (what each pod runs)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from fwbench.core import registry

k8s_app = typer.Typer(no_args_is_help=True, help="Run the matrix as Kubernetes Indexed Jobs (one pod per cell).")


@k8s_app.command("render")
def render_cmd(
    stack: List[str] = typer.Option(..., "--stack", help="Stack id (repeatable)."),
    task: Optional[List[str]] = typer.Option(None, "--task", help="Task id (repeatable); default: all 12."),
    preset: str = typer.Option("paper", envvar="FWBENCH_PRESET", help="tiny, small or paper."),
    compile: Optional[List[str]] = typer.Option(None, "--compile", help="native-torch compile modes (repeatable)."),
    repeats: int = typer.Option(1, help="Independent pods per cell."),
    steps: Optional[int] = typer.Option(None, help="Timed steps (default: the preset's)."),
    threads: int = typer.Option(8, help="CPU threads per cell (a pod cannot see the node's core count ahead)."),
    cpu: Optional[str] = typer.Option(None, "--cpu", help="CPU each pod requests and is limited to (a Kubernetes "
                                      "quantity; default: --threads)."),
    memory: str = typer.Option("32Gi", "--memory", help="Memory each pod requests and is limited to."),
    scratch: str = typer.Option("16Gi", "--scratch", help="Size limit of each pod's data and /tmp emptyDirs."),
    pin_set: Optional[str] = typer.Option(None, "--pin-set", envvar="FWBENCH_PIN_SET", help="current or paper-2024."),
    release: Path = typer.Option(..., "--release", help="release.json of `fwbench publish`: images by digest."),
    variant: str = typer.Option("gpu", help="Image variant: gpu (one nvidia.com/gpu per pod) or cpu."),
    parallelism: int = typer.Option(1, help="Pods of one stack at once (one GPU each)."),
    results_claim: str = typer.Option("fwbench-results", help="PersistentVolumeClaim the rows go to."),
    namespace: Optional[str] = typer.Option(None, help="Namespace of the objects."),
    name: str = typer.Option("fwbench", help="Name prefix of the objects (DNS-1123)."),
    output: Path = typer.Option(..., "-o", "--output", help="Directory for the YAML files."),
) -> None:
    """Write per stack a ConfigMap (the plan) and an Indexed Job, plus a deny-all NetworkPolicy."""
    from fwbench.cluster import k8s
    from fwbench.engines import matrix
    from fwbench.cli.common import pin_set_or_default, released_images
    from fwbench.core.usage import UsageError
    from fwbench.core.identity import SAFE_NAME
    from fwbench.core.spec import CellSpec

    if variant not in ("cpu", "gpu"):
        raise UsageError(f"--variant must be cpu or gpu, not {variant!r}")
    if min(repeats, threads, parallelism, steps or 1) < 1:
        raise UsageError("--repeats, --threads, --parallelism and --steps must be at least 1")
    if not SAFE_NAME.match(name) or name.lower() != name or "." in name or "_" in name or len(name) > 63:
        raise UsageError(f"--name {name!r} is not a DNS-1123 label (lower case letters, digits, '-'; at most 63)")
    resources = k8s.PodResources(cpu=cpu or str(threads), memory=memory, scratch=scratch)
    try:
        resources.check()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    preset_obj = registry.get_preset(preset)
    pin_set = pin_set_or_default(pin_set)
    base = CellSpec(stack="", task="", preset=preset, compile_mode="", data_dir="/data", steps=steps,
                    warmup=preset_obj.warmup, threads=threads, timeout_s=preset_obj.timeout_s, pin_set=pin_set,
                    image_variant=variant, engine="current", device=variant, device_setting=variant)
    specs = matrix.plan(stack, task, preset, compile, repeats, base)
    images = released_images(release, [s.stack for s in specs], pin_set, variant)
    try:
        files = k8s.render(specs, images, output, name, parallelism, results_claim, variant == "gpu", namespace,
                           resources)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for path in files:
        print(path)
    print(f"kubectl apply -f {output}  (then: kubectl get jobs -l app.kubernetes.io/name=fwbench -w)", file=sys.stderr)


@k8s_app.command("run-cell")
def run_cell_cmd(
    plan: Path = typer.Argument(..., help="The plan (cells.json of the ConfigMap)."),
    out: Path = typer.Option(..., "--out", help="Results directory (the PersistentVolumeClaim)."),
    index: Optional[int] = typer.Option(None, "--index", envvar="JOB_COMPLETION_INDEX",
                                        help="Which cell (Kubernetes sets JOB_COMPLETION_INDEX)."),
) -> None:
    """Run cell INDEX of the plan in this image (current engine), resuming: an ok row already there is kept.
    Exits 0 once the row is written, whatever its status (a failed cell is a row, not a pod retry)."""
    from fwbench.cluster import cellplan
    from fwbench.engines.local import current_engine
    from fwbench.core.usage import UsageError

    if index is None:
        raise UsageError("no cell index: pass --index or run as an Indexed Job pod (JOB_COMPLETION_INDEX)")
    try:
        spec = cellplan.cell_of_index(plan, index)
    except cellplan.PlanError as exc:
        raise UsageError(str(exc)) from None
    result = cellplan.run_planned_cell(spec, out, current_engine(spec.pin_set, spec.device or "gpu"), _explain_stop)
    row = result.row or {}
    print(f"{row.get('status', '?')} {spec.cell_id} r{spec.repeat}: {result.path}", file=sys.stderr)
    if not result.path.is_file():
        raise typer.Exit(1)


def _explain_stop(kind: str, signal_name: str) -> str:
    return (f"Kubernetes stopped the pod ({signal_name}: the Job or pod was deleted, preempted or evicted, or "
            "its activeDeadlineSeconds passed) before the cell finished")
