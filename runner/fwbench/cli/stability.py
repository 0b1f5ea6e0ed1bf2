"""`fwbench stability`: is a precision numerically sound for a fit? An untimed fit on a learnable target at the
precision and at fp32, compared step by step (fwbench.engines.stability, docs/workloads.md#stability)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import typer
from rich.markup import escape

from fwbench.cli.common import STATUS_STYLE, check_out_dir, console, default_data_dir, make_engine
from fwbench.cli.options import MatrixOptions, Override, matrix_options
from fwbench.core import stability as stability_core
from fwbench.core.usage import UsageError

STEPS_HELP = (f"Optimizer steps of each fit (default {stability_core.DEFAULT_STEPS}; at least 2). Untimed: a few hundred "
              "at tiny take seconds per fit.")


def _number(value, digits: str = ".4g") -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, digits)


def summary_line(record: dict) -> str:
    """One line per record: status, losses, deviation, loss scaling, or why not."""
    status = str(record.get("status"))
    name = escape(f"{record['stack']} {record['task']} {record['precision']}")
    style = STATUS_STYLE.get(status, "red")
    if status not in ("ok", "diverged"):
        return f"[{style}]{status}[/] {name}: {escape(str(record.get('error_message') or '').splitlines()[0][:200])}"
    detail = (f"loss {_number(record.get('first_loss'))} -> {_number(record.get('final_loss'))} "
              f"(fp32 {_number(record.get('baseline_final_loss'))}), max deviation from fp32 "
              f"{_number(record.get('max_rel_deviation'), '.2%')} at step {record.get('max_rel_deviation_step')}, "
              f"{record.get('nonfinite_steps')} non-finite")
    if record.get("loss_scale_final") is not None:
        detail += (f", loss scale {_number(record.get('loss_scale_initial'), 'g')} -> "
                   f"{_number(record.get('loss_scale_final'), 'g')}, {record.get('loss_scale_skipped_steps')} skipped")
    if record.get("diverged_reason"):
        detail += f" [magenta]diverged: {escape(str(record['diverged_reason']))}[/]"
    return f"[{style}]{status}[/] {name}: {escape(detail) if status == 'ok' else detail}"


def register(app: typer.Typer) -> None:
    @app.command("stability")
    # A stability fit runs on one device (its losses are compared step by step): no --devices, --global-batch.
    @matrix_options(omit=("compile", "warmup", "repeats", "per_step_sync", "parallel", "jit", "devices",
                          "global_batch"),
                    task=Override(required=True, default_text="", help="Fit task id (repeatable)."),
                    precision=Override(required=True, help="The precision to check against fp32: published, fp32, "
                                                           "tf32, bf16 or fp16."),
                    steps=Override(default=stability_core.DEFAULT_STEPS, help=STEPS_HELP))
    def stability_cmd(
        options: MatrixOptions,
        out: Path = typer.Option(Path("stability-results"), "--out", "-o",
                                 help="Results directory: records go to OUT/stability/ (fwbench aggregate reads them)."),
    ) -> None:
        """Train each (stack, task) untimed on a learnable target at --precision and at fp32, and record the loss
        trajectory, its largest deviation from fp32's, skipped and non-finite steps, and whether it diverged."""
        from fwbench.engines import matrix
        from fwbench.engines.stability import run_stability, stability_spec
        from fwbench.cli.build_status import build_status

        base = options.base_spec(data_dir=str((options.data or default_data_dir()).resolve()),
                                 threads=options.threads or os.cpu_count() or 1)
        try:
            specs = [stability_spec(base, stack=stack, task=task, steps=options.steps)
                     for stack in dict.fromkeys(options.stack or []) for task in dict.fromkeys(options.task or [])]
        except stability_core.StabilityError as exc:
            raise UsageError(str(exc)) from None
        runner = make_engine("local", device=options.device, pin_set=options.pin_set)
        check_out_dir(out)
        matrix.ensure_data(specs)
        failed = False
        for spec in specs:
            with build_status(console, f"preparing {spec.stack} (local engine)") as report:
                runner.prepare(spec.stack, report)
            then = "" if spec.precision == stability_core.BASELINE_PRECISION else ", then at fp32"
            console.print(f"{escape(spec.stack)} {escape(spec.task)}: {options.steps} steps at {spec.precision}{then} ...",
                          highlight=False)
            record, path = run_stability(runner, spec, out)
            console.print(summary_line(record), highlight=False)
            failed |= record["status"] not in ("ok", "diverged", "unsupported")
        console.print(f"stability records: {out / 'stability'}")
        if failed:
            raise typer.Exit(1)
