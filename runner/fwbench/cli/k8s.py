"""`fwbench k8s render` (the plan as Kubernetes objects) and `fwbench k8s run-cell` (what each pod runs)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from fwbench.cli.options import (MODEL_FILE_OPTIONS, MODEL_FILE_OVERRIDES, MatrixOptions, Override, matrix_options,
                                  require_stack_or_model)

k8s_app = typer.Typer(no_args_is_help=True, help="Run the matrix as Kubernetes Indexed Jobs (one pod per cell).")


@k8s_app.command("render")
# A pod's data is its own emptyDir and its device its image's variant; a pod cannot see the node's core count ahead.
# A --devices N cell's pod requests N GPUs (nvidia.com/gpu: N), or on the CPU at least N CPUs (--cpu).
@matrix_options(omit=("data", "device", "parallel"), opt_in=MODEL_FILE_OPTIONS, **MODEL_FILE_OVERRIDES,
                threads=Override(default=8, help="CPU threads per cell (a pod cannot see the node's cores ahead)."))
def render_cmd(
    options: MatrixOptions,
    cpu: Optional[str] = typer.Option(None, "--cpu", help="CPU each pod requests and is limited to (a Kubernetes "
                                      "quantity; default: --threads)."),
    memory: str = typer.Option("32Gi", "--memory", help="Memory each pod requests and is limited to."),
    scratch: str = typer.Option("16Gi", "--scratch", help="Size limit of each pod's data and /tmp emptyDirs."),
    release: Path = typer.Option(..., "--release", help="release.json of `fwbench publish`: images by digest."),
    variant: str = typer.Option("gpu", help="Image variant: gpu (--devices nvidia.com/gpu per pod, default 1) or cpu."),
    parallelism: int = typer.Option(1, help="Pods of one stack at once (--devices GPUs each)."),
    results_claim: str = typer.Option("fwbench-results", help="PersistentVolumeClaim the rows go to."),
    namespace: Optional[str] = typer.Option(None, help="Namespace of the objects."),
    name: str = typer.Option("fwbench", help="Name prefix of the objects (DNS-1123)."),
    output: Path = typer.Option(..., "--out", "-o", "--output", help="Directory for the YAML files."),
) -> None:
    """Write per stack a ConfigMap (the plan) and an Indexed Job, plus a deny-all NetworkPolicy."""
    from fwbench.cluster import k8s
    from fwbench.cli.common import pin_set_or_default, released_images
    from fwbench.core.usage import UsageError
    from fwbench.core.identity import SAFE_NAME

    require_stack_or_model(options)
    if variant not in ("cpu", "gpu"):
        raise UsageError(f"--variant must be cpu or gpu, not {variant!r}")
    if parallelism < 1:
        raise UsageError(f"--parallelism must be at least 1, got {parallelism}")
    if not SAFE_NAME.match(name) or name.lower() != name or "." in name or "_" in name or len(name) > 63:
        raise UsageError(f"--name {name!r} is not a DNS-1123 label (lower case letters, digits, '-'; at most 63)")
    resources = k8s.PodResources(cpu=cpu or str(options.threads), memory=memory, scratch=scratch)
    try:
        resources.check()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    pin_set = pin_set_or_default(options.pin_set)
    base = options.base_spec(data_dir="/data", threads=options.threads, pin_set=pin_set, image_variant=variant,
                             engine="current", device=variant, device_setting=variant)
    specs = options.plan(base)
    images = released_images(release, [s.stack for s in specs], pin_set, variant)
    try:
        files = k8s.render(specs, images, output, name, parallelism, results_claim=results_claim, gpu=variant == "gpu", namespace=namespace,
                           resources=resources)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for path in files:
        print(path)
    print(f"kubectl apply -f {output}  (then: kubectl get jobs -l app.kubernetes.io/name=fwbench -w)", file=sys.stderr)


@k8s_app.command("run-cell")
def run_cell_cmd(
    plan: Path = typer.Argument(..., help="The plan (cells.json of the ConfigMap)."),
    out: Path = typer.Option(..., "--out", "-o", help="Results directory (the PersistentVolumeClaim)."),
    index: Optional[int] = typer.Option(None, "--index", envvar="JOB_COMPLETION_INDEX",
                                        help="Which cell (Kubernetes sets JOB_COMPLETION_INDEX)."),
) -> None:
    """Run cell INDEX of the plan in this image (current engine), resuming: an ok row already there is kept.
    Exits 0 once the row is written, whatever its status (a failed cell is a row, not a pod retry)."""
    from fwbench.cluster import cellplan
    from fwbench.engines.local import current_engine
    from fwbench.cli.common import planned_cell, report_planned_cell

    spec = planned_cell(plan, index, "an Indexed Job pod (JOB_COMPLETION_INDEX)")
    result = cellplan.run_planned_cell(spec, out, current_engine(spec.pin_set, spec.device or "gpu"), _explain_stop)
    report_planned_cell(spec, result)


def _explain_stop(kind: str, signal_name: str) -> str:
    return (f"Kubernetes stopped the pod ({signal_name}: the Job or pod was deleted, preempted or evicted, or "
            "its activeDeadlineSeconds passed) before the cell finished")
