"""What can be benchmarked: stacks, tasks and presets (sizes).

This module is the single source of the matrix and of every stack fact: which harness backend times a
stack, its Keras backend and major version, the environment switches of its cell process, its XLA
policy per task, its image repository and its place in the report. The runner, the harness, the
engines, the workloads and the aggregator read these definitions; none of them compares a stack id to a
stack name (tests/test_stack_facts.py checks that). Model sizes, input shapes and input generators are in
fwbench.core.models, one definition per model. The contract every stack implements is docs/workloads.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from fwbench.core import model_file, models, pins


class RegistryError(ValueError):
    """An unknown stack, task, preset or variant (a user error: exit 2, no traceback)."""


# Docker image names, written out here only: a stack's repository (once pushed, REGISTRY/fwbench/<stack>) and a tag
# naming the pin set and the image variant, e.g. fwbench/keras3-jax:paper-2024-gpu.
IMAGE_REPOSITORY = "fwbench/{stack}"
IMAGE_TAG = "{pin_set}-{variant}"
IMAGE_TEMPLATE = f"{IMAGE_REPOSITORY}:{IMAGE_TAG}"  # a locally built image's name; the docker engine's default


def image_name(stack: str, pin_set: str, variant: str, template: str = IMAGE_TEMPLATE) -> str:
    """The image of a stack, pin set and variant, by `template` (default: the locally built image's name)."""
    return template.format(stack=stack, pin_set=pin_set, variant=variant)


HARNESS_BACKENDS = ("torch", "jax", "tensorflow")
# --jit: `published` gives every Keras cell the XLA setting the published code gave it; `on` / `off` force
# jit_compile on every Keras cell (the matched view). Native stacks have no such switch.
JIT_POLICIES = ("published", "on", "off")

# Allocate GPU memory as needed rather than grabbing it all up front, so the peak memory column means
# something (JAX preallocates 75% by default; TF maps the whole GPU). Every Keras stack sets these.
_KERAS_GPU_ALLOCATION = (("XLA_PYTHON_CLIENT_PREALLOCATE", "false"), ("TF_FORCE_GPU_ALLOW_GROWTH", "true"),
                         ("TF_CPP_MIN_LOG_LEVEL", "2"))


@dataclass(frozen=True)
class DataParallel:
    """How a stack runs a fit data-parallel, as a user of the stack would (docs/workloads.md#data-parallel-scaling;
    fwbench.core.scaling reads it)."""
    idiom: str
    tasks: tuple[str, ...]  # the fit tasks with a data-parallel variant in fwbench so far
    comm_backend_cpu: str  # the collectives gradients are reduced with (the comm_backend column)
    comm_backend_gpu: str
    process_per_device: bool = False  # N processes, one rank per device; else one process drives N devices


@dataclass(frozen=True)
class Stack:
    id: str
    family: str  # which workload package runs it: "torch" or "keras"
    framework: str  # the library whose version identifies the stack
    compile_modes: tuple[str, ...]  # allowed --compile values; first one is the default
    description: str
    harness_backend: str  # fwbench.harness.backends: torch, jax or tensorflow
    report_rank: int  # position in the published column order (the report's order)
    keras_version: int | None = None  # Keras major version (3, 2), None for native stacks
    keras_backend: str | None = None  # KERAS_BACKEND of a Keras 3 stack (read once, at import)
    xla: bool | None = None  # Keras jit_compile for every task (None: not a Keras stack)
    # Per-task exceptions to `xla` (task id -> jit_compile), for tasks whose published run differed.
    xla_overrides: tuple[tuple[str, bool], ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # variables set in the cell's process
    env_unset: tuple[str, ...] = ()  # variables removed from an inherited environment
    # Models this stack cannot run faithfully (model id -> reason): `unsupported` rows, like the
    # published table's NA.
    unsupported: tuple[tuple[str, str], ...] = ()
    # What the published run installed for this stack (package -> version, as its requirements named them)
    # and how the paper-2024 pin set differs from it on purpose (see fwbench.core.pins).
    published_pins: tuple[tuple[str, str], ...] = ()
    pin_deviations: tuple[pins.Deviation, ...] = (pins.PYTHON_DEVIATION,)
    # Rough disk, GB (fwbench.core.footprint, for `fwbench doctor`): the local environment's installed wheels, and
    # the image per variant (the CPU sizes measured, rounded up; GPU images add the CUDA libraries).
    environment_gb: float = 0.0
    image_gb: tuple[tuple[str, float], ...] = ()
    # Data-parallel fits (--devices N); None, with the reason, where the stack has no data parallelism to run.
    data_parallel: DataParallel | None = None
    no_data_parallel: str | None = None

    def __post_init__(self) -> None:
        if self.family not in ("torch", "keras"):
            raise ValueError(f"stack {self.id}: unknown family {self.family!r}")
        if self.harness_backend not in HARNESS_BACKENDS:
            raise ValueError(f"stack {self.id}: unknown harness backend {self.harness_backend!r}")
        if (self.family == "keras") != (self.keras_version is not None) or (self.xla is None) != (
                self.keras_version is None):
            raise ValueError(f"stack {self.id}: a Keras stack needs keras_version and xla, a native one neither")
        for model_id, _reason in self.unsupported:
            if model_id not in models.MODELS:
                raise ValueError(f"stack {self.id}: unsupported model {model_id!r} is not a model")

    def jit_compile(self, task_id: str, policy: str = "published") -> bool | None:
        """Keras jit_compile (XLA) for this task under a --jit policy (default: as published); None for a
        native (non-Keras) stack."""
        if self.xla is None:
            return None
        if policy not in JIT_POLICIES:
            raise RegistryError(f"unknown --jit policy '{policy}' (choose from: {', '.join(JIT_POLICIES)})")
        if policy != "published":
            return policy == "on"
        return dict(self.xla_overrides).get(task_id, self.xla)

    def environment(self) -> dict[str, str]:
        """The framework switches this stack's cell process needs (Keras reads them at import time)."""
        return dict(self.env)

    def unsupported_reason(self, model_id: str) -> str | None:
        return dict(self.unsupported).get(model_id)

    @property
    def image_repository(self) -> str:
        """The Docker image repository of this stack (tagged <pin-set>-<variant>, e.g. paper-2024-gpu)."""
        return IMAGE_REPOSITORY.format(stack=self.id)


# Every fit task: the encoder fits (SAM, Stable Diffusion), BERT and the LLMs' LoRA fits.
_FITS = ("sam-fit", "stable_diffusion-fit", "bert-fit", "gemma-fit", "mistral-fit")
_MIRRORED = DataParallel("tf.distribute.MirroredStrategy, one process, one replica per device", _FITS,
                         "tf.distribute", "tf.distribute")  # the workload reports which cross-device ops it chose
_DATA_PARALLEL_KERAS3 = {
    "tensorflow": _MIRRORED,
    "jax": DataParallel("keras.distribution.DataParallel, one process, SPMD over a 1-D device mesh", _FITS,
                        "xla-collectives", "xla-collectives"),
}
_NO_DATA_PARALLEL_KERAS3 = {
    "torch": ("Keras 3 on PyTorch has no data parallelism of its own: keras.distribution is implemented for the JAX "
              "and TensorFlow backends only (keras/src/backend/{jax,tensorflow}/distribution_lib.py, none for "
              "torch), and no Keras release known to fwbench adds it for torch"),
}


def _keras3(backend: str, harness_backend: str, *, report_rank: int, xla: bool,
            published_backend: tuple[tuple[str, str], ...], deviations: tuple[pins.Deviation, ...] = (),
            environment_gb: float, image_gb: tuple[float, float]) -> Stack:
    """A Keras 3 stack: KERAS_BACKEND selects the backend (Keras reads it once, at import time)."""
    names = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
    policy = "jit_compile=True" if xla else "eager (as published)"
    return Stack(f"keras3-{backend}", "keras", "keras", ("xla",) if xla else ("none",),
                 f"Keras 3, {names[backend]} backend, {policy}", harness_backend=harness_backend,
                 report_rank=report_rank, keras_version=3, keras_backend=backend, xla=xla,
                 env=(("KERAS_BACKEND", backend), *_KERAS_GPU_ALLOCATION),
                 published_pins=(("python", pins.PUBLISHED_PYTHON), ("keras", "3.0.5"), *published_backend,
                                 *pins.KERAS_COMMON_PINS),
                 pin_deviations=(pins.PYTHON_DEVIATION, *deviations), environment_gb=environment_gb,
                 image_gb=(("cpu", image_gb[0]), ("gpu", image_gb[1])),
                 data_parallel=_DATA_PARALLEL_KERAS3.get(backend), no_data_parallel=_NO_DATA_PARALLEL_KERAS3.get(backend))


_JAX_DEVIATION = ("jax 0.4.20's CUDA build was only on Google's own index; 0.4.23 is the first release PyPI serves "
                  "for CUDA 12 (jax-cuda12-plugin/-pjrt), and the CPU variant uses the same version")


STACKS: dict[str, Stack] = {
    s.id: s
    for s in (
        Stack("native-torch", "torch", "torch",
              ("none", "reduce-overhead", "default", "max-autotune"),
              "PyTorch + HF Transformers/Diffusers/PEFT + Meta segment-anything",
              harness_backend="torch", report_rank=4,
              published_pins=(("python", pins.PUBLISHED_PYTHON), ("torch", "2.2.1"), ("torchvision", "0.17.1"),
                              ("transformers", "4.38.2"), ("datasets", "2.15.0"), ("diffusers", "0.25.0"),
                              ("peft", "0.9.0"), ("segment-anything", "git 6fdee8f2727f4506cfbbe553e23b895e27956588")),
              pin_deviations=(pins.PYTHON_DEVIATION, pins.Deviation(
                  "segment-anything", "git 6fdee8f2727f4506cfbbe553e23b895e27956588", "1.0",
                  "a hash-locked install needs a release: PyPI's segment-anything 1.0, whose model code "
                  "(segment_anything/modeling) differs from that commit only in docstrings")),
              environment_gb=6.3, image_gb=(("cpu", 7.0), ("gpu", 7.0)),
              data_parallel=DataParallel("torch DistributedDataParallel, one process per device (through the HF "
                                         "Trainer for the Trainer fits)", _FITS, "gloo", "nccl",
                                         process_per_device=True)),
        _keras3("tensorflow", "tensorflow", report_rank=0, xla=True,
                published_backend=(("tensorflow", "2.15.0.post1"),), environment_gb=2.7, image_gb=(3.0, 5.5)),
        _keras3("jax", "jax", report_rank=1, xla=True, published_backend=(("jax", "0.4.20"), ("jaxlib", "0.4.20")),
                deviations=(pins.Deviation("jax", "0.4.20", "0.4.23", _JAX_DEVIATION),
                            pins.Deviation("jaxlib", "0.4.20", "0.4.23", "goes with jax (above)")),
                environment_gb=3.3, image_gb=(3.5, 7.5)),
        # As published: eager on the PyTorch backend.
        _keras3("torch", "torch", report_rank=2, xla=False, published_backend=(("torch", "2.2.1"),),
                environment_gb=7.6, image_gb=(8.5, 8.5)),
        Stack("keras2-tensorflow", "keras", "tensorflow", ("xla",), "Keras 2 (tf.keras / tf-keras), XLA",
              harness_backend="tensorflow", report_rank=3, keras_version=2, xla=True,
              # tf.keras is Keras 2 (tf-keras) even on TF >= 2.16; a no-op on 2.15, whose bundled Keras is 2.15.
              env=(("TF_USE_LEGACY_KERAS", "1"), *_KERAS_GPU_ALLOCATION),
              # KerasNLP/KerasCV 0.8 switch to multi-backend keras_core when KERAS_BACKEND is set.
              env_unset=("KERAS_BACKEND",),
              # As published (keras-benchmarks v0.0.5 on Keras 2.15, whose compile() defaults to
              # jit_compile=None, i.e. no XLA): SAM predict runs the segmenter, which was never compiled
              # (only its backbone was), and SD fit compiled without jit_compile.
              xla_overrides=(("sam-predict", False), ("stable_diffusion-fit", False)),
              unsupported=(
                  ("gemma", "KerasNLP 0.8.2 GemmaBackbone requires Keras 3: it refuses to build on Keras 2 "
                            "(the published table reports Keras 2 Gemma as NA)"),
                  ("mistral", "KerasNLP 0.8.2 Mistral on Keras 2 cannot run the published task: its "
                              "bfloat16 (mixed_bfloat16) path fails inside attention, and enable_lora on Keras 2 "
                              "freezes every weight without adding LoRA layers (the published table reports NA)"),
              ),
              published_pins=(("python", pins.PUBLISHED_PYTHON), ("tensorflow", "2.15.0.post1"),
                              *pins.KERAS_COMMON_PINS),
              environment_gb=2.1, image_gb=(("cpu", 2.5), ("gpu", 5.5)), data_parallel=_MIRRORED),
    )
}

# Published column order: Keras 3 backends, Keras 2, then native PyTorch.
REPORT_ORDER: tuple[str, ...] = tuple(s.id for s in sorted(STACKS.values(), key=lambda s: s.report_rank))


@dataclass(frozen=True)
class Task:
    id: str  # e.g. "gemma-generate-bs32"
    model: str  # sam, stable_diffusion, bert, gemma, mistral (a key of fwbench.core.models.MODELS)
    kind: str  # fit, predict, generate
    batch: Mapping[str, int] = field(hash=False)  # preset -> batch size; `paper` = the published v2 table's

    def __post_init__(self) -> None:
        if self.model not in models.MODELS:
            raise ValueError(f"task {self.id}: unknown model {self.model!r}")
        if self.kind not in models.TASK_KINDS:
            raise ValueError(f"task {self.id}: unknown kind {self.kind!r}")
        if set(self.batch) != set(models.PRESET_IDS):
            raise ValueError(f"task {self.id}: batch sizes for {sorted(self.batch)}, need {models.PRESET_IDS}")
        object.__setattr__(self, "batch", MappingProxyType(dict(self.batch)))

    @property
    def published_batch(self) -> int:
        return self.batch["paper"]

    @property
    def label(self) -> str:
        return f"{self.model} {self.kind}"


@dataclass(frozen=True)
class ModelFileTask(Task):
    """A task of a user's model file (fwbench.core.model_file, `fwbench run --model`): its model is the file, its
    kind and batch come from its id (`my_model.py-fit-bs32`), the same at every preset (which then sets only the
    default steps, warm-up and timeout)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch", MappingProxyType(dict(self.batch)))


def model_file_task(task_id: str | None) -> Task | None:
    """The task a model-file task id names, or None (never a registry task: get_task stays the registry's)."""
    parsed = model_file.parse_task(task_id)
    if parsed is None:
        return None
    return ModelFileTask(parsed.id, parsed.model, parsed.kind, {preset: parsed.batch for preset in models.PRESET_IDS})


def _task(task_id: str, model: str, kind: str, batch: tuple[int, int, int]) -> Task:
    paper, small, tiny = batch
    return Task(task_id, model, kind, {"paper": paper, "small": small, "tiny": tiny})


TASKS: dict[str, Task] = {
    t.id: t
    for t in (
        # id, model, kind, then (batch size at paper (= the published table), at small, at tiny)
        _task("sam-fit",                  "sam",              "fit",      (1,   1,  1)),
        _task("sam-predict",              "sam",              "predict",  (4,   4,  2)),
        _task("stable_diffusion-fit",     "stable_diffusion", "fit",      (8,   4,  2)),
        _task("stable_diffusion-predict", "stable_diffusion", "predict",  (13,  4,  2)),
        _task("bert-fit",                 "bert",             "fit",      (32,  16, 4)),
        _task("bert-predict",             "bert",             "predict",  (256, 64, 8)),
        _task("gemma-fit",                "gemma",            "fit",      (8,   4,  2)),
        _task("gemma-generate-bs32",      "gemma",            "generate", (32,  16, 4)),
        _task("gemma-generate-bs1",       "gemma",            "generate", (1,   1,  1)),
        _task("mistral-fit",              "mistral",          "fit",      (8,   4,  2)),
        _task("mistral-generate-bs32",    "mistral",          "generate", (32,  16, 4)),
        _task("mistral-generate-bs1",     "mistral",          "generate", (1,   1,  1)),
    )
}


@dataclass(frozen=True)
class Preset:
    id: str
    steps: int  # default timed steps
    warmup: int  # default warm-up steps
    timeout_s: float  # default per-cell timeout
    description: str
    # Task kind -> its default timed steps where that differs from `steps` (see default_steps).
    kind_steps: tuple[tuple[str, int], ...] = ()


PRESETS: dict[str, Preset] = {
    p.id: p
    for p in (
        Preset("tiny", 5, 2, 900.0, "CPU-sized: every cell in seconds; used by tests and CI"),
        Preset("small", 20, 2, 3600.0, "fits a 16-24 GB GPU"),
        # A generate step is a whole 44-token generate() call: the published Keras 3 + PyTorch ones took 7.6-11.1 s
        # on an A100, so 100 of them would take a cell 15-20 minutes. 10 still give a per-step median and spread.
        Preset("paper", 100, 2, 7200.0, "the published A100 sizes and batch sizes", kind_steps=(("generate", 10),)),
    )
}
assert tuple(PRESETS) == models.PRESET_IDS


def default_steps(task_id: str, preset: str) -> int:
    """The timed steps a cell of this task gets at this preset unless --steps says otherwise: the one place
    per-task defaults live (they are part of the cell identity, like any step count)."""
    kind = (model_file_task(task_id) or get_task(task_id)).kind
    return dict(get_preset(preset).kind_steps).get(kind, get_preset(preset).steps)


@dataclass(frozen=True)
class Workload:
    """One task at one preset: everything a stack needs to build and feed the model."""

    task: Task
    preset: str
    batch_size: int
    arch: Any  # the model's architecture class (fwbench.core.models), e.g. BertArch
    shapes: Any  # the model's shapes class (fwbench.core.models), e.g. TextShapes

    @property
    def model(self) -> models.Model:
        return models.MODELS[self.task.model]


def workload(task_id: str, preset: str) -> Workload:
    task = model_file_task(task_id)
    if task is not None:  # a model file's: its sizes are the file's own
        get_preset(preset)
        return Workload(task, preset, task.batch[preset], None, None)
    task = get_task(task_id)
    get_preset(preset)
    model = models.MODELS[task.model]
    return Workload(task, preset, task.batch[preset], model.archs[preset], model.shapes[preset])


def _choose(kind: str, value: str, table: dict) -> Any:
    if value not in table:
        raise RegistryError(f"unknown {kind} '{value}' (choose from: {', '.join(table)})")
    return table[value]


def get_stack(stack_id: str) -> Stack:
    return _choose("stack", stack_id, STACKS)


def get_task(task_id: str) -> Task:
    return _choose("task", task_id, TASKS)


def get_preset(preset_id: str) -> Preset:
    return _choose("preset", preset_id, PRESETS)


def check_compile_mode(stack: Stack, mode: str) -> str:
    if mode not in stack.compile_modes:
        raise RegistryError(
            f"compile mode '{mode}' is not available on stack '{stack.id}' "
            f"(choose from: {', '.join(stack.compile_modes)})")
    return mode
