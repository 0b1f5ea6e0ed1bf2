"""The cell process: `python -m fwbench.harness.cell SPEC.json RECORD.json`.

Runs one (stack, task, preset, variant, repeat) and writes exactly one record (JSON) that the
runner turns into a Parquet row. Whatever happens, a record is written: ok, error, oom or
unsupported (a timeout is recorded by the runner, which kills the process).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gc
import importlib
import json
import os
import sys
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fwbench import __version__
from fwbench.core import data, pins, precision, registry, scaling, stability
from fwbench.harness import backends, ceiling, contention, envinfo, gpu_identity, hold, interconnect, ranks
from fwbench.harness.device_check import DeviceUnavailable, require_cpu, require_gpu
from fwbench.harness.energy import EnergyProbe, Probes
from fwbench.harness.clock import StepClock, run_loop
from fwbench.core.atomic import write_atomically
from fwbench.core.schema import SCHEMA_VERSION
from fwbench.core.cpusets import THREAD_VARIABLES, own_cpu_count, own_cpu_set
from fwbench.core.spec import CellSpec
from fwbench.workloads import CellContext, DrivenCell, StepCell, Unsupported, check_cell, model_source

KERAS_ENVIRONMENT = ("KERAS_BACKEND", "TF_USE_LEGACY_KERAS", "XLA_PYTHON_CLIENT_PREALLOCATE",
                     "TF_FORCE_GPU_ALLOW_GROWTH", "JAX_PLATFORMS")
OOM_MARKERS = ("out of memory", "resource_exhausted", "resourceexhausted", "oom when allocating")
# Failures that say a library has no kernel, or no consistent dtype handling, for a precision: under a --precision
# other than published they mean the stack cannot run that precision (unsupported, with the library's message).
DTYPE_MARKERS = ("does not match type", "no opkernel", "not implemented for 'half'", "not implemented for 'bfloat16'",
                 "expected scalar type", "same dtype", "should be the same", "unsupported dtype", "dtype mismatch",
                 # tf.experimental.numpy (Keras 2 / keras_core ops) treats bfloat16 as a non-float and tries to cast it
                 "has no attribute 'astype'",
                 # XLA:CPU has no float16 matmul accumulating in float32 (keras3-jax fp16 Mistral on a CPU)
                 "is not supported by dot_general")


def precision_unsupported(spec: CellSpec, exc: BaseException) -> bool:
    """Whether a cell's failure is the library's lack of a kernel or of consistent dtype handling for the
    precision asked (an `unsupported` row in its own words), rather than an error."""
    return spec.precision != precision.DEFAULT_PRECISION and any(marker in str(exc).lower()
                                                                 for marker in DTYPE_MARKERS)


# TensorFlow's XLA cannot compile a step that reads variables on several devices (its known issue
# "tf.Variable on a different device"): MirroredStrategy with jit_compile=True fails so on N CPU devices.
MIRRORED_XLA_MARKER = "tfvariable_on_a_different_device"


def unsupported_variant(spec: CellSpec, exc: BaseException) -> str | None:
    """Why the library cannot run this variant of the cell, in its own words (the row's error_message, status
    unsupported), or None: the failure is an error. Asked of failures that are errors only (classify_failure)."""
    message = str(exc).strip()[:4000] or type(exc).__name__
    if precision_unsupported(spec, exc):
        return (f"--precision {spec.precision}: the library has no kernel or no consistent dtype handling for it "
                f"here: {message}")[:4000]
    if spec.devices > 1 and MIRRORED_XLA_MARKER in str(exc).lower().replace(".", "_"):
        return (f"--devices {spec.devices}: tf.distribute.MirroredStrategy with jit_compile=True: XLA cannot compile "
                "the replicated train step, whose variables live on several devices (TensorFlow's known issue "
                "'tf.Variable on a different device'); --jit off runs it without XLA: "
                + next((line.strip() for line in str(exc).splitlines() if "Trying to access resource" in line),
                       str(exc).strip().splitlines()[-1]))[:4000]
    return None


def base_record(spec: CellSpec) -> dict[str, Any]:
    """The identifying fields every row has, whatever its status (the runner uses it too)."""
    stack = registry.STACKS.get(spec.stack)
    task = registry.TASKS.get(spec.task) or registry.model_file_task(spec.task)
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "fwbench_version": __version__,
        "source_commit": envinfo.source_commit(),
        "run_id": spec.run_id,
        "record_id": uuid.uuid4().hex,
        "cell_id": spec.cell_id,
        "stack": spec.stack,
        "family": stack.family if stack else None,
        "framework": stack.framework if stack else None,
        "model": task.model if task else None,
        "task": spec.task,
        "task_kind": task.kind if task else None,
        "preset": spec.preset,
        "compile_mode": spec.compile_mode,
        "repeat": spec.repeat,
        "engine": spec.engine,
        "pin_set": spec.pin_set,
        "image_variant": spec.image_variant,
        "device_model": spec.device_model,
        "device_setting": spec.device_setting,
        "warmup_steps": spec.warmup,
        "timed_steps": spec.steps,
        "per_step_sync": spec.per_step_sync,
        "threads": spec.threads,
        "tf32_setting": spec.tf32,
        "precision": spec.precision,
        "jit_policy": spec.jit,
        "data_seed": spec.seed,
        # Where the runner placed the cell; the cell process overwrites cpu_set with the cores it really had.
        "cpu_set": spec.cpu_set,
        "gpu_index": spec.gpu_index,
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "model_sha256": spec.model_sha256,
        "model_file": spec.model_file,
    }
    jit_compile = stack.jit_compile(spec.task, spec.jit) if stack and task else None
    if jit_compile is not None:  # Keras stacks: XLA or eager, per the stack definition
        record["jit_compile"] = jit_compile
    record["devices"] = spec.devices
    record["steps_per_execution"] = spec.steps_per_execution
    record["global_batch_setting"] = spec.global_batch
    if task and spec.preset in registry.PRESETS:
        try:
            per_device, global_batch = scaling.batches(registry.workload(spec.task, spec.preset).batch_size,
                                                       spec.devices, spec.global_batch)
        except ValueError:  # a spec file with impossible scaling: measure() raises it again, into the error row
            return record
        # One step's samples over all devices (the task's batch on one device, weak scaling).
        record.update(batch_size=global_batch, per_device_batch=per_device, global_batch=global_batch)
    return record


def classify_failure(exc: BaseException) -> str:
    if isinstance(exc, ranks.RankFailed):
        return exc.status
    if isinstance(exc, Unsupported):
        return "unsupported"
    if isinstance(exc, DeviceUnavailable):
        return "device_unavailable"
    if isinstance(exc, MemoryError) or type(exc).__name__ in ("OutOfMemoryError", "ResourceExhaustedError"):
        return "oom"
    text = str(exc).lower()
    return "oom" if any(marker in text for marker in OOM_MARKERS) else "error"


def _inject_fault_before_build(spec: CellSpec) -> None:
    if spec.fault == "raise":
        raise RuntimeError("injected fault: this workload raises on purpose")
    if spec.fault and spec.fault.startswith("sleep:"):
        time.sleep(float(spec.fault.split(":", 1)[1]))


def _with_step_delay(step, delay_ms: float):
    def slowed_step():
        output = step()
        time.sleep(delay_ms / 1000.0)
        return output
    return slowed_step


def planted_step_delay_ms(fault: str | None) -> float | None:
    """The delay a test plants in every step: `step-sleep:MS`, or `step-sleep-from:PACKAGE==VERSION:MS`, a delay only
    where PACKAGE is installed at VERSION or later (a change planted at a release, for `fwbench watch`'s test).
    None: no delay."""
    if not fault:
        return None
    if fault.startswith("step-sleep:"):
        return float(fault.split(":", 1)[1])
    if fault.startswith("step-sleep-from:"):
        from packaging.version import InvalidVersion, Version

        requirement, _, delay = fault[len("step-sleep-from:"):].rpartition(":")
        package, _, version = requirement.partition("==")
        try:
            return float(delay) if Version(_installed(package)) >= Version(version) else None
        except InvalidVersion:  # not installed
            return None
    return None


def measure(spec: CellSpec, work_dir: Path | None = None) -> dict[str, Any]:
    """Build, time and describe one cell. Raises on failure (the caller records it). work_dir: the run's
    work directory (where the record goes), which keeps the CPU ceiling measured once per run."""
    phases = PhaseTimer()
    built = build_cell(spec, phases)  # data_load, framework_import, workload_import
    timed = time_cell(built)
    phases.done("build_and_steps")  # setup_s, first_step_s and the timed steps are on the row
    result, extra = describe(built, timed)
    phases.done("describe")
    if spec.devices > 1:
        # The ceiling is one device's (or one rank's cores'), the step's FLOPs all devices': not comparable yet.
        extra["physics"] = "not computed for data-parallel rows (the ceiling is per device)"
    elif spec.model_file is not None and built.ctx.step_cost is None:
        pass  # a model file's layers fwbench could not count: extra.physics (the workload's) says why
    else:
        # After the timed window: the CPU ceiling (a GEMM) must not run inside it.
        result.update(ceiling.physics_row({**base_record(spec), **result}, built.backend.on_gpu, work_dir,
                                          mig_slice=bool(timed.known_gpu and timed.known_gpu.mig),
                                          gemm=getattr(built.backend, "gemm_tflops", None), cost=built.ctx.step_cost))
    phases.done("ceiling")
    # Where the cell process's time went besides the measurement (first_contact.py reads it).
    extra["phases_s"] = {"interpreter_start": process_age_s(), **phases.seconds}
    if planted_step_delay_ms(spec.fault):
        extra["injected_fault"] = spec.fault  # a test's planted delay: never a measurement of the cell alone
    result["extra"] = {**extra, **result.get("extra", {})}
    return result


@dataclass
class Built:
    """A cell built and ready to time (build_cell), with what describe reports about its inputs and set-up."""

    stack: registry.Stack
    ctx: CellContext  # the spec, the workload, the inputs, the backend, and what the workload reported
    cell: StepCell | DrivenCell
    input_sha256: str
    data_seed: int
    compile_cache_warm: bool | None
    setup_s: float  # the workload's build() and a device sync
    learnable_target: str | None = None  # a stability run's target rule (fwbench.core.stability); None: shared data

    @property
    def spec(self) -> CellSpec:
        return self.ctx.spec

    @property
    def workload(self) -> registry.Workload:
        return self.ctx.workload

    @property
    def backend(self) -> Any:
        return self.ctx.backend


@dataclass
class Timed:
    """The timed steps of a built cell (time_cell): their clock, the probes that watched the window, and the
    GPU they ran on."""

    clock: StepClock
    contention: contention.ContentionProbe
    energy: EnergyProbe
    cell_gpu: gpu_identity.CellGpu | None  # by UUID (NVML's view); None: a CPU cell, or NVML could not say
    known_gpu: gpu_identity.CellGpu | None  # cell_gpu, else the GPU CUDA_VISIBLE_DEVICES names (GPU cells)
    gpu_index: int | None


def build_cell(spec: CellSpec, phases: PhaseTimer) -> Built:
    """Load the inputs, import and configure the framework, import the workload and build the cell, marking the
    phases data_load, framework_import and workload_import. Raises Unsupported, DeviceUnavailable, DataError..."""
    stack = registry.get_stack(spec.stack)
    workload = registry.workload(spec.task, spec.preset)
    registry.check_compile_mode(stack, spec.compile_mode)
    scaling.check(spec.devices, spec.global_batch)  # a spec file, not the CLI, can ask for impossible scaling
    if spec.model_file is not None:  # its inputs are made by the file, once its framework is imported
        arrays, input_sha256, seed = {}, None, spec.seed
    else:
        arrays, input_sha256, seed = data.load(Path(spec.data_dir), spec.preset, spec.task)
    target = None
    if spec.stability_run:  # the same bytes, with a target the model can learn (fwbench.core.stability)
        arrays, target = stability.learnable_inputs(workload.task.model, workload.arch, arrays)
    phases.done("data_load")
    _inject_fault_before_build(spec)
    reason = stack.unsupported_reason(workload.task.model)
    scaling_reason = scaling.unsupported_reason(stack.id, workload.task.id, workload.task.kind, spec.devices,
                                                spec.global_batch)
    if not reason and scaling_reason and stack.family == "keras":
        scaling_reason += f" (this environment: {_keras_installed(stack.keras_version)})"
    if not reason and spec.steps_per_execution > 1 and (stack.family != "keras" or spec.model_file is None):
        reason = (f"--steps-per-execution {spec.steps_per_execution}: Keras's compile(steps_per_execution=N), for a "
                  "model file's Keras cells (docs/your-model.md); a native step is one call")
    if reason or scaling_reason:
        raise Unsupported(reason or scaling_reason)

    module_name = (f"fwbench.workloads.{stack.family}.model_file" if spec.model_file is not None
                   else f"fwbench.workloads.{stack.family}.{workload.task.model}")
    held = hold_ahead(spec, module_name, phases)  # started ahead of its turn: imports, then held (harness.hold)
    backend = backends.backend_for(stack.id, spec.threads, spec.devices)
    if spec.device == "gpu":
        require_gpu(backend)
    elif spec.device == "cpu":
        require_cpu(backend)
    cache_warm = backend.use_compile_cache(compile_cache_dir(stack.id, spec.pin_set, spec.compile_mode,
                                                             cpus=own_cpu_count()), spec.compile_mode)
    backend.configure(spec.threads, spec.tf32)
    device_reason = precision.device_unsupported_reason(spec.precision, has_tf32=backend.tf32_available())
    if device_reason:
        raise Unsupported(device_reason)
    if spec.devices > 1:
        check_data_parallel_devices(backend, spec.devices)
    phases.done("framework_import")
    source = None
    if spec.model_file is not None:
        source = model_source.load(spec)  # the user's file, imported by this backend's process
        arrays, input_sha256, made = model_source.inputs(spec, source, workload.batch_size)
        phases.done("model_file")  # importing the file, and making or reading its inputs
    module = importlib.import_module(module_name)
    ctx = CellContext(spec=spec, workload=workload, arrays=arrays, backend=backend, model_source=source)
    if source is not None:
        ctx.report(extra={"model_inputs": "made by this cell" if made else "read: made by an earlier cell"})
    phases.done("workload_import")
    if held is not None:
        ctx.report(extra={"held": held})
    waited = hold.wait_for_neighbours()  # the set-up and all after it run beside held neighbours only
    if waited is not None:
        phases.done("neighbours")
        ctx.report(extra={"neighbours": waited})

    setup_start = time.perf_counter()
    cell = check_cell(module.build(ctx), module.CELLS, workload.task.kind, module.__name__)
    backend.sync(None)
    setup_s = time.perf_counter() - setup_start
    record_initial_weights(ctx)
    return Built(stack, ctx, cell, input_sha256, seed, cache_warm, setup_s, target)


def hold_ahead(spec: CellSpec, module_name: str, phases: PhaseTimer) -> dict[str, Any] | None:
    """A cell started ahead of its turn (FWBENCH_HOLD_DIR, fwbench.harness.hold): import the framework and the
    workload, touching no device, then wait to be released (phases import_ahead and held). None when not asked to
    hold; else what the row records: the seconds held, and any device runtime the imports started (none expected)."""
    if not hold.asked_to_hold():
        return None
    backends.prepare_framework(spec.stack, spec.threads, spec.devices)
    importlib.import_module(module_name)
    phases.done("import_ahead")
    started = backends.device_started()
    held_s = hold.hold_here()
    phases.done("held")
    return {"held_s": held_s, **({"device_started_ahead": started} if started else {})}


def record_initial_weights(ctx: CellContext) -> None:
    """A fit's checksum of the weights it starts from (initial_weights_sha256), read after the build and before the
    first step: neither setup_s nor the timed window holds it (its own seconds: extra.initial_weights_s)."""
    start = time.perf_counter()
    checksum = ctx.initial_weights_sha256()
    if checksum is not None:
        ctx.report(initial_weights_sha256=checksum,
                   extra={"initial_weights_s": round(time.perf_counter() - start, 4)})


def check_data_parallel_devices(backend: Any, devices: int) -> None:
    """Raise DeviceUnavailable unless the backend has the `devices` a data-parallel cell asks for (after configure():
    TensorFlow's logical devices and threads replace its single-device choices): never N devices' row from fewer."""
    seen = backend.data_parallel_devices(devices)
    if seen < devices:
        kind = "GPU(s)" if backend.on_gpu else "CPU device(s)"
        raise DeviceUnavailable(f"--devices {devices}: {backend.label} sees {seen} {kind}")


def _keras_installed(keras_version: int | None) -> str:
    """The Keras a Keras stack runs, by its distribution: Keras 2 is tf-keras where TensorFlow no longer bundles
    it (a `keras` 3 may sit beside it, unused), else the `keras` TensorFlow 2.15 came with."""
    tf_keras = _installed("tf-keras")
    if keras_version == 2 and tf_keras != "not installed":
        return f"tf-keras {tf_keras}"
    return f"Keras {_installed('keras')}"


def _installed(distribution: str) -> str:
    """A distribution's installed version, read without importing it."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def time_cell(built: Built) -> Timed:
    """Run the warm-up and timed steps under the clock, with the contention and energy probes (and, for a
    compiled torch cell, the CUDA-graph replay count) watching the timed window."""
    spec, backend = built.spec, built.backend
    # The GPUs the steps run on (a data-parallel rank's own; every GPU of a process that drives several), by UUID
    # (NVML's view of them); None: NVML could not say (the energy says so).
    positions = backend.gpu_positions() if backend.on_gpu else ()
    cell_gpus = [gpu_identity.resolve_cell_gpu(framework_uuid=gpu_identity.framework_gpu_uuid(position),
                                               position=position) for position in positions]
    known_gpus = [gpu or gpu_identity.unresolved_gpu(position=position) for gpu, position in zip(cell_gpus, positions)]
    cell_gpu, known_gpu = (cell_gpus[0], known_gpus[0]) if positions else (None, None)
    probe = contention.ContentionProbe(spec.threads, backend.on_gpu, known_gpus)
    gpu_index = _runner_gpu_index(spec, positions[0], known_gpu) if known_gpu else None
    energy = EnergyProbe(backend.on_gpu, *cell_gpus)
    window_probes = [probe, energy]
    if built.stack.family == "torch" and spec.compile_mode != "none":
        window_probes.append(backend.count_cudagraph_replays())  # did the compiled code replay as CUDA graphs?
    sync = backend.sync
    if spec.devices > 1 and hasattr(backend, "barrier"):
        def sync(output, device_sync=backend.sync):
            # Data-parallel ranks: the clock is read only once every rank has finished the step.
            device_sync(output)
            backend.barrier()
    clock = StepClock(sync, spec.warmup, spec.steps, spec.per_step_sync, Probes(*window_probes),
                      steps_per_call=spec.steps_per_execution)
    if isinstance(built.cell, DrivenCell):
        built.cell.drive(clock)
    else:
        step = built.cell.step
        delay_ms = planted_step_delay_ms(spec.fault)
        if delay_ms:
            step = _with_step_delay(step, delay_ms)
        run_loop(clock, step)
    built.ctx.finish()  # after the timed window: what the cell reads once the steps have run (loss scale, ...)
    if spec.fault == "nan-loss" and built.ctx.losses:
        built.ctx.losses[-1] = float("nan")
    return Timed(clock, probe, energy, cell_gpu, known_gpu, gpu_index)


def _runner_gpu_index(spec: CellSpec, position: int, found: gpu_identity.CellGpu) -> int | None:
    """The GPU at the framework's `position` in the runner's numbering: its slot's (a container numbers them from
    0); without a slot, the one it found."""
    placed = spec.gpus
    return placed[position] if position < len(placed) else found.index


def describe(built: Built, timed: Timed) -> tuple[dict[str, Any], dict[str, Any]]:
    """The measured row fields (timings, memory, environment, device, compile facts, contention, energy) and the
    harness's own `extra` fields, which measure merges under whatever `extra` the row fields hold."""
    spec, stack, workload, backend, clock = built.spec, built.stack, built.workload, built.backend, timed.clock
    ms_per_step = clock.ms_per_step()
    peak_mem_bytes, peak_mem_kind = backend.peak_memory()
    environment = envinfo.environment()
    versions = environment.pop("library_versions")
    device = backend.device_info()
    # Data-parallel rows: one step processes the global batch (all devices'); one device: the task's batch.
    per_device_batch, global_batch = scaling.batches(workload.batch_size, spec.devices, spec.global_batch)
    result: dict[str, Any] = {
        "setup_s": built.setup_s,
        "first_step_s": clock.first_step_s,
        "ms_per_step": ms_per_step,
        "step_ms": clock.step_ms(),
        "samples_per_s": global_batch * 1000.0 / ms_per_step,
        "batch_size": global_batch,
        "per_device_batch": per_device_batch,
        "global_batch": global_batch,
        "comm_backend": scaling.comm_backend(stack.id, backend.on_gpu) if spec.devices > 1 else None,
        "peak_mem_bytes": peak_mem_bytes,
        "peak_mem_kind": peak_mem_kind,
        "input_sha256": built.input_sha256,
        "data_seed": built.data_seed,
        "framework_version": versions.get(stack.framework),
        "library_versions": versions,
        "pin_deviations": _pin_deviations(spec, versions, environment["python_version"]),
        "compile_cache_warm": built.compile_cache_warm,
        **{k: v for k, v in environment.items() if k != "gpu_names"},
        **device,
        **backend.precision_state(),
    }
    if result.get("device") == "cpu":
        result["device_name"] = environment["cpu_model"]
    # The identity names the device the cell really ran on, in the runner's words (envinfo.device_model).
    result["device_model"] = envinfo.device_model(result.get("device") != "cpu", timed.cell_gpu)
    result.update(timed.contention.result())
    result["gpu_index"] = timed.gpu_index
    result["gpu_uuid"] = timed.cell_gpu.device_uuid if timed.cell_gpu else None
    extra: dict[str, Any] = {"gpu_found_by": timed.known_gpu.found_by} if timed.known_gpu else {}
    if backend.threads() != spec.threads:  # `threads` stays the requested setting (identity)
        extra["threads_effective"] = backend.threads()
    extra["process_settings"] = process_settings()
    extra["context_switches"] = timed.contention.context_switches()
    held_neighbours = timed.contention.held_neighbours()
    if held_neighbours:  # cells held in the window, idle: not competition (harness.hold)
        extra["held_neighbours"] = held_neighbours
    if backend.compile_cache_folder:  # which programs it could share: the folder names the CPU count
        extra["compile_cache"] = backend.compile_cache_folder
    manifest = envinfo.image_manifest()
    if manifest:
        extra["image_manifest"] = manifest
    if stack.family == "torch":
        stats = backend.compile_stats()
        extra["graph_break_reasons"] = stats.pop("graph_break_reasons")
        result.update(stats)
        if spec.compile_mode != "none":
            result["compile_took_effect"] = backends.compile_took_effect(spec.compile_mode, stats, spec.steps)
    if stack.family == "keras":
        # The switches Keras reads from the environment (backend, legacy Keras, GPU allocation, JAX's device).
        extra["keras_environment"] = {key: os.environ.get(key) for key in KERAS_ENVIRONMENT}
    result.update(built.ctx.reported)
    # ranks.merge keeps rank 0's: the other ranks of a torch cell need not read NVML or run nvidia-smi again.
    if spec.devices > 1 and not ranks.local_rank():
        result.update(_interconnect(spec, backend, result.get("comm_backend"), extra))
    _check_precision(spec, built.workload.task.model, result)
    if built.workload.task.kind == "fit":
        result["nonfinite_losses"] = built.ctx.nonfinite_losses()
    tokens = (workload.batch_size * result["tokens_generated"]
              if workload.task.kind == "generate" and result.get("tokens_generated") else None)
    result.update(timed.energy.result(spec.steps, tokens))
    extra.update(timed.energy.extra(spec.steps, tokens))
    return result, extra


def _interconnect(spec: CellSpec, backend: Any, comm_backend: str | None, extra: dict[str, Any]) -> dict[str, Any]:
    """A data-parallel row's collectives version and, on GPUs, how its N GPUs are connected (the cell's N GPUs are
    the first N its CUDA_VISIBLE_DEVICES names, whichever of them this process's steps ran on); `nvidia-smi topo -m`
    as printed goes to extra where the binary is there."""
    fields: dict[str, Any] = {"comm_backend_version": backend.comm_version(comm_backend) if comm_backend else None}
    if backend.on_gpu:
        gpus = [gpu_identity.resolve_cell_gpu(position=position) for position in range(spec.devices)]
        fields["interconnect"] = interconnect.describe([gpu for gpu in gpus if gpu is not None]
                                                       if all(gpus) else [])
        topology = interconnect.nvidia_smi_topology()
        if topology:
            extra["nvidia_smi_topo"] = topology
    return fields


def measure_stability(spec: CellSpec) -> dict[str, Any]:
    """`fwbench stability`: build the fit as a timed cell would be built, run its steps untimed (no probes, no
    ceiling) and keep every step's loss, the loss scale before and after, and what ran. Raises on failure."""
    if registry.get_task(spec.task).kind != "fit":
        raise Unsupported(f"a stability run trains: {spec.task} is not a fit task")
    stability.overflow_step(spec.fault)  # a malformed overflow:STEP fails here, before anything is built
    phases = PhaseTimer()
    built = build_cell(spec, phases)
    clock = StepClock(built.backend.sync, spec.warmup, spec.steps, per_step_sync=False)
    if isinstance(built.cell, DrivenCell):
        built.cell.drive(clock)
    else:
        run_loop(clock, built.cell.step)
    built.ctx.finish()
    phases.done("build_and_steps")
    # The model build and the first (compiling) step, apart from the other steps: start-up is not the steps' cost.
    phases.seconds.update(setup_s=round(built.setup_s, 4), first_step_s=round(clock.first_step_s or 0.0, 4))
    versions = envinfo.environment()["library_versions"]
    result: dict[str, Any] = {
        "stability_steps": built.ctx.total_steps, "learnable_target": built.learnable_target, "fault": spec.fault,
        "stability_losses": [float(loss) for loss in built.ctx.losses], "input_sha256": built.input_sha256,
        "data_seed": built.data_seed, "framework_version": versions.get(built.stack.framework),
        "library_versions": versions, **built.backend.device_info(), **built.ctx.reported}
    if len(result["stability_losses"]) != built.ctx.total_steps:
        raise RuntimeError(f"the fit recorded {len(result['stability_losses'])} losses for "
                           f"{built.ctx.total_steps} steps")
    result["loss_scale_initial"] = (result.get("extra") or {}).get("loss_scale_initial")
    result["device_model"] = envinfo.device_model(result.get("device") != "cpu", None)
    _check_precision(spec, built.workload.task.model, result)
    result["nonfinite_losses"] = built.ctx.nonfinite_losses()
    result["extra"] = {**(result.get("extra") or {}), "phases_s": phases.seconds}
    return result


def _check_precision(spec: CellSpec, model: str, result: dict[str, Any]) -> None:
    """Never a silent fallback: a cell whose model computed in another dtype than its precision asks for (the
    workload inspects what ran: compute_dtype) is unsupported, with what really ran."""
    expected = precision.expected_compute_dtype(spec.precision, model)
    ran = result.get("compute_dtype")
    if ran is not None and ran != expected:
        raise Unsupported(f"--precision {spec.precision} asks for {expected} compute, but the model computed in {ran} "
                          "on this stack and device (a silent fallback, not recorded as the precision asked)")


def in_processes(spec: CellSpec) -> bool:
    """Whether the cell runs as N processes (native-torch DistributedDataParallel, one rank per device) rather
    than in this one (one device, or one process driving N devices: JAX SPMD)."""
    stack = registry.STACKS.get(spec.stack)
    task = registry.TASKS.get(spec.task) or registry.model_file_task(spec.task)  # a model file's fit too
    return (spec.devices > 1 and stack is not None and task is not None and stack.data_parallel is not None
            and stack.data_parallel.process_per_device
            and scaling.unsupported_reason(stack.id, task.id, task.kind, spec.devices) is None)


def measure_data_parallel(spec: CellSpec, work_dir: Path) -> dict[str, Any]:
    """The cell as `spec.devices` ranks launched from this process (fwbench.harness.ranks), timed as the slowest."""
    workload = registry.workload(spec.task, spec.preset)
    _, global_batch = scaling.batches(workload.batch_size, spec.devices, spec.global_batch)
    # Started ahead of its turn (harness.hold): the launcher holds, without imports ahead (its ranks import), and
    # its ranks, processes of their own, neither hold nor wait again.
    held_s = hold.hold_here()
    waited = hold.wait_for_neighbours()
    os.environ.pop(hold.HOLD_ENV, None)
    fields = ranks.launch(_rank_main, spec.to_json(), spec.devices, work_dir=str(work_dir), timeout_s=spec.timeout_s)
    merged = ranks.merge(fields, global_batch)
    facts = {**({"held": {"held_s": held_s}} if held_s is not None else {}),
             **({"neighbours": waited} if waited is not None else {})}
    if facts:
        merged["extra"] = {**(merged.get("extra") or {}), **facts}
    return merged


def _rank_main(spec_json: str, rank: int, *, world: int, port: int, cores: list[int], work_dir: str,
               results) -> None:
    """One rank (a spawned process): the rendezvous variables, its share of the cores, then the cell's own
    measure(); what it measured, or why it failed, goes back to the launcher."""
    os.environ.update(ranks.rank_environment(rank, world, port))
    spec = CellSpec.from_json(spec_json)
    if cores:
        os.sched_setaffinity(0, cores)
        # The framework's threads are the rank's share of the cores (the row's `threads` stays the cell's).
        spec = dataclasses.replace(spec, threads=len(cores))
    # accelerate sets OMP_NUM_THREADS to 1 in a multi-process CPU run when it is unset: the rank's own count instead.
    os.environ["OMP_NUM_THREADS"] = str(spec.threads)
    try:
        fields = measure(spec, Path(work_dir))
        fields["cpu_set"] = own_cpu_set()
        fields.setdefault("extra", {})["threads_per_rank"] = spec.threads
        results.put((rank, "ok", json.loads(json.dumps(fields, default=str))))
    except BaseException as exc:  # noqa: BLE001 - the launcher records it
        results.put((rank, classify_failure(exc), f"{type(exc).__name__}: {str(exc).strip()[:3000]}"))


def process_settings() -> dict[str, Any]:
    """What the cell process ran under beyond the identity's settings: the thread pools' variables as it found them
    (the engine sets them), and the garbage collector as the timed window met it (fwbench leaves Python's defaults:
    freezing it before the window changed nothing measurable, benchmarks/harness_noise.py --candidate gc-freeze)."""
    return {"thread_variables": {name: os.environ.get(name) for name in THREAD_VARIABLES},
            "gc": {"enabled": gc.isenabled(), "thresholds": list(gc.get_threshold()),
                   "frozen_objects": gc.get_freeze_count()}}


class PhaseTimer:
    """Seconds per named phase, each from the end of the previous one."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._since = time.perf_counter()

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self._since, 4)
        self._since = now


_PROCESS_AGE_AT_IMPORT: float | None = None


def process_age_s() -> float | None:
    """Seconds from this process's start (the kernel's record) to the harness starting the cell: interpreter
    start-up and the harness's own imports. None where /proc is not there."""
    return _PROCESS_AGE_AT_IMPORT


def _process_age_now() -> float | None:
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
        return round(max(0.0, uptime_s - int(fields[19]) / os.sysconf("SC_CLK_TCK")), 2)  # field 22: starttime
    except (OSError, ValueError, IndexError):
        return None


def compile_cache_dir(stack_id: str, pin_set: str, compile_mode: str, *, cpus: int) -> Path | None:
    """JAX's persistent compilation cache for a cell, only where the user asked for one: FWBENCH_COMPILE_CACHE names
    its root, and the folder is per stack, pin set, mode and number of CPUs the process may run on. None (the
    default): every cell process compiles its programs, as JAX does by default, as a cell in its own container
    always did and as the published study's runs did. Inductor keeps its own cache, as torch does by default.

    Opt-in because a keras3-jax process that loaded its programs from the cache ran its steps slower and less
    evenly than one that compiled them, though the loaded program itself runs as fast (docs/development.md, the
    compilation cache): with a shared cache a cell's first repeat compiled and its later ones loaded, two process
    states under one identity. Per CPU count because what XLA's CPU compiler makes of a program depends on the CPUs
    its process may use, and JAX's cache key does not hold that number."""
    root = os.environ.get("FWBENCH_COMPILE_CACHE")
    if not root:
        return None
    return Path(root) / f"{stack_id}-{pin_set}-{compile_mode}-{cpus}cpu"


def _pin_deviations(spec: CellSpec, versions: dict[str, str], python_version: str) -> str | None:
    """paper-2024 rows say how what ran differs from the published pins (other pin sets: null)."""
    if spec.pin_set != pins.PUBLISHED_PIN_SET:
        return None
    return "; ".join(pins.pin_deviations(registry.get_stack(spec.stack), spec.pin_set, versions, python_version))


def run(spec: CellSpec, record_path: Path) -> int:
    global _PROCESS_AGE_AT_IMPORT
    _PROCESS_AGE_AT_IMPORT = _process_age_now()
    start = time.perf_counter()
    record = base_record(spec)
    record["cpu_set"] = own_cpu_set()  # the cores it really runs on (the engine pinned them before start)
    try:
        if spec.stability_run:
            record.update(measure_stability(spec))
        elif in_processes(spec):
            record.update(measure_data_parallel(spec, record_path.parent))
        else:
            record.update(measure(spec, record_path.parent))
        # A fit whose loss went non-finite ran (its timings stay) but is not ok.
        record["status"] = "diverged" if record.get("nonfinite_losses") else "ok"
    except BaseException as exc:  # noqa: BLE001 - every failure must become a row
        record["status"] = classify_failure(exc)
        record["error_type"] = type(exc).__name__
        record["error_message"] = str(exc).strip()[:4000] or type(exc).__name__
        record["extra"] = {"traceback": traceback.format_exc(limit=8)[-6000:]}
        unsupported = unsupported_variant(spec, exc) if record["status"] == "error" else None
        if unsupported:
            record["status"], record["error_message"] = "unsupported", unsupported
        if isinstance(exc, KeyboardInterrupt):
            record["error_message"] = "interrupted"
    record["wall_s"] = time.perf_counter() - start
    write_atomically(record_path, json.dumps(record, default=str))
    return 0 if record["status"] in ("ok", "unsupported", "diverged") else 1


def main(argv: list[str] | None = None) -> int:
    hold.block_release_signal()  # before any import starts a thread (fwbench.harness.hold)
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m fwbench.harness.cell SPEC.json RECORD.json", file=sys.stderr)
        return 2
    spec = CellSpec.from_json(Path(args[0]).read_text())
    return run(spec, Path(args[1]))


if __name__ == "__main__":
    exit_code = main()
    # The record is written: skip the interpreter's teardown (about a second of freeing framework state that
    # nothing reads; not part of any measurement), so the next cell starts sooner.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
