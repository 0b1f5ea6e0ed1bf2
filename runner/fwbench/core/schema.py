"""The columns of a result row: one list, used by the writer, the reader and docs/results-schema.md.

Plain Python (no pyarrow import) so a cell process can name its fields without the Parquet stack.
Bump SCHEMA_VERSION on any change that renames, removes or retypes a column.
"""

from __future__ import annotations

from fwbench.core import axes

SCHEMA_VERSION = 14
# Columns each version added; rows of an older version are read with the newer columns left empty.
ADDED_IN_V2 = ("settings_id", "jit_policy", "image_variant", "device_model", "busy", "busy_reasons", "load_avg_1m",
               "cpu_share", "other_cpu_cores", "concurrent_cells", "gpu_other_processes", "gpu_other_mem_bytes")
ADDED_IN_V3 = ("pin_deviations", "compiled_target", "tokenize_in_step")
ADDED_IN_V4 = ("cpu_set", "gpu_index", "parallel_cells")
PHYSICS_COLUMNS = ("model_flops_per_step", "flops_convention", "achieved_tflops", "compute_precision", "peak_tflops",
                   "peak_source", "pct_of_peak", "precision_suspect", "bytes_per_step", "pct_of_bandwidth")
ENERGY_COLUMNS = ("energy_status", "energy_j", "joules_per_step", "joules_per_token", "mean_power_w", "sm_clock_mhz",
                  "gpu_temp_c", "throttle_reasons")
ADDED_IN_V5 = PHYSICS_COLUMNS + ENERGY_COLUMNS
# v6: the device asked for and the GPU by UUID; convolution TF32 apart from matmul TF32, the precision each part of
# the model's FLOPs ran at; CUDA-graph replays (whether reduce-overhead really took effect).
ADDED_IN_V6 = ("device_setting", "gpu_uuid", "tf32_conv", "tf32_conv_effective", "matmul_compute_precision",
               "conv_compute_precision", "conv_flops_per_step", "cudagraph_replays")
# v7: precision as an axis (--precision), what the model really computed in and held its variables in, loss scaling
# and non-finite losses of fits; the status `diverged`.
ADDED_IN_V7 = ("precision", "compute_dtype", "variable_dtype", "loss_scale", "loss_scale_skipped_steps",
               "nonfinite_losses")
# v8: version sweeps (fwbench sweep / bisect): the point a row measured, and what its environment really installed.
ADDED_IN_V8 = ("sweep_point", "sweep_installed")
# v9: data-parallel scaling (--devices, --global-batch): the devices a fit ran on, the batch per device and in all,
# the global batch asked for (an identity setting) and the collectives that reduced the gradients.
ADDED_IN_V9 = ("devices", "per_device_batch", "global_batch", "global_batch_setting", "comm_backend")
# v10: what a data-parallel row's devices talked over: the collectives' version and, on GPUs, the links between them.
ADDED_IN_V10 = ("comm_backend_version", "interconnect")
# v11: the checksum of the weights a fit starts from (every fit is seeded by --seed).
ADDED_IN_V11 = ("initial_weights_sha256",)
# v12: a user's model file as a cell source (fwbench run --model): its SHA-256 (an identity setting) and path, and
# whether its PyTorch twin has the Keras model's trainable parameters.
ADDED_IN_V12 = ("model_sha256", "model_file", "twin_params_keras", "twin_params_match")
# v13: Keras steps_per_execution (an identity setting): steps per call of the compiled step.
ADDED_IN_V13 = ("steps_per_execution",)
# v14: the commit of the fwbench source a cell ran from (a checkout's HEAD, or the image's build argument).
ADDED_IN_V14 = ("source_commit",)
ADDED_IN = {2: ADDED_IN_V2, 3: ADDED_IN_V3, 4: ADDED_IN_V4, 5: ADDED_IN_V5, 6: ADDED_IN_V6, 7: ADDED_IN_V7,
            8: ADDED_IN_V8, 9: ADDED_IN_V9, 10: ADDED_IN_V10, 11: ADDED_IN_V11,
            12: ADDED_IN_V12, 13: ADDED_IN_V13, 14: ADDED_IN_V14}

STATUSES = ("ok", "error", "timeout", "oom", "cancelled", "unsupported", "device_unavailable", "diverged")

# (name, type, description). Types: string, int64, float64, bool, timestamp, list<float64>.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("schema_version", "int64", "Version of this schema (see SCHEMA_VERSION)."),
    ("fwbench_version", "string", "fwbench package version that produced the row."),
    ("source_commit", "string", "Git commit of the fwbench source the cell ran from: the HEAD of the checkout its "
                                "package was imported from, or in an image the commit it was built from "
                                "(FWBENCH_SOURCE_COMMIT, from the build argument GIT_REVISION); 'unknown' when "
                                "neither says (an installed package, an image built without it; rows before schema "
                                "v14 have none)."),
    ("run_id", "string", "One id per `fwbench run` invocation."),
    ("record_id", "string", "Unique id of this row."),
    ("cell_id", "string", "stack.task.preset.compile-<mode>: the readable part of the cell identity."),
    ("settings_id", "string", "Hash of the identity settings (fwbench.core.axes: "
                              + ", ".join(axis.name for axis in axes.AXES) + "): equal cell_id and settings_id = "
                              "repeats of one measurement."),
    ("stack", "string", "native-torch, keras3-tensorflow, keras3-jax, keras3-torch, keras2-tensorflow."),
    ("family", "string", "Workload family that ran it: torch or keras."),
    ("framework", "string", "Library that identifies the stack (torch, keras, tensorflow)."),
    ("framework_version", "string", "Version of `framework`."),
    ("model", "string", "sam, stable_diffusion, bert, gemma, mistral."),
    ("task", "string", "Task id, e.g. bert-fit, gemma-generate-bs32."),
    ("task_kind", "string", "fit, predict or generate."),
    ("preset", "string", "tiny, small or paper (paper = published sizes)."),
    ("batch_size", "int64", "Batch size actually used (data-parallel rows: the global batch, all devices')."),
    ("compile_mode", "string", "native-torch: none/reduce-overhead/default/max-autotune; Keras: xla or none."),
    ("jit_compile", "bool", "Keras jit_compile flag the cell really used (null for native-torch)."),
    ("jit_policy", "string", "--jit: published (each Keras cell's XLA setting as in the published run), on or off."),
    ("repeat", "int64", "Repeat index (each repeat is its own process)."),
    ("status", "string", "ok, error, timeout, oom, cancelled (stopped by the cluster's scheduler), unsupported, "
                         "device_unavailable (the cell was meant for a GPU its framework could not use: never a "
                         "CPU row instead), or diverged (a fit that ran, with its timings, but whose loss went "
                         "non-finite: see nonfinite_losses)."),
    ("error_type", "string", "Exception class or failure kind when status is not ok."),
    ("error_message", "string", "One-paragraph reason when status is not ok."),
    ("engine", "string", "local (managed venv), current (this interpreter) or docker."),
    ("image_id", "string", "Docker image id (docker engine only)."),
    ("image_digest", "string", "The image by registry digest (REGISTRY/fwbench/STACK@sha256:...), when it came from a "
                               "registry: docker engine from the reference it started (a release's) or the image's "
                               "RepoDigests; current engine from FWBENCH_IMAGE_DIGEST (compose with a release.env)."),
    ("pin_set", "string", "Library pin set: current or paper-2024 (the published run's versions)."),
    ("pin_deviations", "string", "paper-2024 rows: how the libraries that ran differ from the published pins, "
                                 "'; '-separated (declared ones are listed in docs/stacks.md; anything else is "
                                 "marked undeclared); empty when none; null for other pin sets."),
    ("image_variant", "string", "Where the libraries came from: cpu or gpu image, venv (local engine), host (current "
                                "engine outside an image)."),
    ("started_at", "timestamp", "UTC start of the cell process."),
    ("wall_s", "float64", "Wall time of the whole cell process, seconds."),
    ("setup_s", "float64", "Model build + data to device, seconds (never in ms_per_step)."),
    ("first_step_s", "float64", "First step (trace/compile), seconds (never in ms_per_step)."),
    ("warmup_steps", "int64", "Untimed warm-up steps after the first step."),
    ("timed_steps", "int64", "Steps in the timed window."),
    ("ms_per_step", "float64", "Timed window wall time / timed_steps, milliseconds, synced at both ends."),
    ("step_ms", "list<float64>", "Per-step times in the window (null if per_step_sync is false; with "
                                 "steps_per_execution N, one per call of N steps, each its mean per step)."),
    ("per_step_sync", "bool", "True if the device was synced after every timed step."),
    ("samples_per_s", "float64", "batch_size / seconds per step (data-parallel rows: the global batch's)."),
    ("peak_mem_bytes", "int64", "Peak memory: device allocator peak on GPU, process peak RSS on CPU. Data-parallel "
                                "rows: the fullest device's (GPUs: the largest allocator peak; CPU ranks: the largest "
                                "rank's RSS; one process on N CPU devices: its RSS); each rank's in "
                                "extra.rank_peak_mem_bytes."),
    ("peak_mem_kind", "string", "Which counter peak_mem_bytes is (cuda_allocator_peak, process_peak_rss, ...)."),
    ("tokens_generated", "int64", "generate: new tokens per sequence actually produced."),
    ("tokenize_in_step", "bool", "generate: True if tokenizing the prompt and detokenizing the output were inside the "
                                 "timed step (fwbench: False, token ids in and out; the published run: True)."),
    ("prompt_len", "int64", "generate: prompt tokens per sequence."),
    ("seq_len", "int64", "Text fit/predict: sequence length."),
    ("input_sha256", "string", "Combined SHA-256 of the shared input files the cell read."),
    ("data_seed", "int64", "Seed of the shared synthetic data; fits seed their initial weights from it too."),
    ("initial_weights_sha256", "string", "Fits: SHA-256 of the weights the fit started from (every weight's dtype, "
                                         "shape and the SHA-256 of each 16 MiB piece of its bytes, in the model's "
                                         "own order: Keras model.weights, torch parameters then buffers; rows before "
                                         "2026-11-29 hashed the bytes in one stream), read after the build, before "
                                         "the first step and outside setup_s. Two fits of one cell and --seed "
                                         "whose weights are held in one dtype (mixed precision keeps float32 "
                                         "weights) start alike."),
    ("params_total", "int64", "Parameters in the model that runs."),
    ("params_trainable", "int64", "Trainable parameters (fit)."),
    ("dtype", "string", "Declared compute dtype, from the precision: float32, bfloat16 or float16 (what physics "
                        "counts the peak at; compute_dtype is what really ran)."),
    ("precision", "string", "--precision asked: published (as the published table ran each task), fp32, tf32, bf16 "
                            "or fp16 (docs/workloads.md#precision)."),
    ("compute_dtype", "string", "The dtype the model actually computed in, inspected from what ran (the output of "
                                "its first dense/linear and convolution layer during the run); 'a+b' when they "
                                "differ."),
    ("variable_dtype", "string", "The dtype(s) its variables/weights are held in, by parameter count, largest first "
                                 "('bfloat16+float32': bf16 weights with float32 LoRA adapters)."),
    ("loss_scale", "float64", "fp16 fits: the loss scale at the end of the fit (dynamic loss scaling; null where "
                              "none was used)."),
    ("loss_scale_skipped_steps", "int64", "fp16 fits: optimizer steps the loss scaler skipped (non-finite "
                                          "gradients)."),
    ("nonfinite_losses", "int64", "Fits: steps whose loss was non-finite (Keras: whose logged running-mean loss "
                                  "was, i.e. from the first non-finite step on); any makes the row diverged."),
    ("compiled_graphs", "int64", "torch.compile: unique graphs compiled (0 = compilation never happened)."),
    ("graph_breaks", "int64", "torch.compile: graph breaks."),
    ("cudagraph_replays", "int64", "torch.compile reduce-overhead: CUDA-graph replays counted in the timed window "
                                   "(torch.cuda.CUDAGraph.replay calls; 0 on a CPU, null when not compiled)."),
    ("cudagraph_skips", "int64", "torch.compile reduce-overhead: CUDA-graph skips (always >0 on CPU; null where "
                                 "torch does not count them, e.g. 2.2)."),
    ("compiled_target", "string", "native-torch compiled cells: what torch.compile compiled (whole train step, "
                                  "model forward, UNet, image encoder + mask decoder, model.forward inside generate, "
                                  "the Trainer's model); null when nothing was compiled."),
    ("compile_took_effect", "bool", "True if the code that ran was compiled (null when compile_mode is none)."),
    ("compile_cache_warm", "bool", "True if the persistent compilation cache (JAX's; Inductor's for compiled torch "
     "cells) already held entries, from this cell's earlier runs or from other cells, before the cell started: "
     "setup_s and first_step_s may then include cache hits (programs that other tasks share, such as "
     "initialisers, hit too). Null: none is used (JAX's only where FWBENCH_COMPILE_CACHE asks for it)."),
    ("threads", "int64", "Intra-op CPU threads requested (--threads); extra.threads_effective if the framework "
                         "reports another number."),
    ("tf32_setting", "string", "Requested TF32 policy (--tf32): default, on, off. Under a --precision "
                                 "other than published the precision's policy is applied instead (the tf32_* "
                                 "columns record the state)."),
    ("tf32_matmul", "bool", "Framework flag allowing TF32 for matmuls."),
    ("tf32_effective", "bool", "True only if TF32 was allowed for matmuls and the GPU supports it."),
    ("tf32_conv", "bool", "Framework flag allowing TF32 for convolutions (torch: cuDNN's; TensorFlow and JAX have "
                          "one switch for matmuls and convolutions, recorded in both columns)."),
    ("tf32_conv_effective", "bool", "True only if TF32 was allowed for convolutions and the GPU supports it."),
    ("matmul_precision", "string", "Framework float32 matmul precision setting."),
    ("device_setting", "string", "--device: auto (the GPU when the host has one), gpu or cpu."),
    ("device", "string", "cpu or cuda (gpu)."),
    ("device_name", "string", "GPU name, or CPU model on CPU."),
    ("device_model", "string", "Identity: the GPU model (NVML name) the cell ran on, or the CPU model (as "
     "cpu_model)."),
    ("device_count", "int64", "Visible accelerators."),
    ("gpu_driver", "string", "NVIDIA driver version (NVML)."),
    ("cuda_driver", "string", "CUDA version supported by the driver (NVML)."),
    ("cuda_runtime", "string", "CUDA runtime the framework was built with."),
    ("cpu_model", "string", "Host CPU model: /proc/cpuinfo's model name and its generation's numbers, e.g. "
     "\"AMD EPYC (family 26, model 2)\" (older rows: the name alone)."),
    ("cpu_count", "int64", "Host logical CPUs."),
    ("hostname", "string", "Host name."),
    ("python_version", "string", "Python version in the cell."),
    ("platform", "string", "OS / libc platform string."),
    ("busy", "bool", "True if something competed with the cell (see busy_reasons); left out of rankings."),
    ("busy_reasons", "string", "Why the row counts as busy: other CPU load, other fwbench cells, other GPU processes."),
    ("load_avg_1m", "float64", "Host 1-minute load average when the timed window began."),
    ("cpu_share", "float64", "The cell process's CPU time in the timed window / (window wall time x threads)."),
    ("other_cpu_cores", "float64", "CPU used by other processes on the cell's cores while it was timed, in cores "
                                   "(/proc/stat)."),
    ("concurrent_cells", "int64", "Other fwbench cell processes that could run on the cell's CPU cores (or use its "
                                  "GPU) during the timed window; cells pinned elsewhere by --parallel do not count."),
    ("cpu_set", "string", "CPU cores the cell process could run on, as a CPU list (\"0-3\", \"0,2\"): its own "
                          "slot's under --parallel, else every core the runner had."),
    ("gpu_uuid", "string", "UUID of the GPU the cell used (NVML/CUDA 'GPU-...'; a MIG slice's own 'MIG-...'; null "
                           "on the CPU or where NVML could not say): the same GPU whatever index a container or "
                           "CUDA_VISIBLE_DEVICES gives it."),
    ("gpu_index", "int64", "NVML index of the GPU the cell used, in the runner's numbering: its own slot's under "
                           "--parallel (a container numbers it 0 inside), else the one CUDA_VISIBLE_DEVICES names or "
                           "the first (null on the CPU); a --devices N cell's first GPU (extra.gpu_indices: all N)."),
    ("parallel_cells", "int64", "Most cells of this run that ran at the same time as this one, itself included "
                                "(1 = it ran alone; more only with --parallel, each on its own cores and GPU)."),
    ("gpu_other_processes", "int64", "Other processes on the cell's GPU (NVML; null on the CPU); on several GPUs, "
                                     "summed over them (a process on two counts twice)."),
    ("gpu_other_mem_bytes", "int64", "GPU memory those other processes held (NVML; null on the CPU)."),
    ("model_flops_per_step", "float64", "Model FLOPs of one timed step, counted analytically from the architecture "
                                        "(fwbench.core.physics; 2 per multiply-add of matmuls, convolutions and "
                                        "attention products; see flops_convention)."),
    ("flops_convention", "string", "How model_flops_per_step was counted: forward 2N + attention, training 6N (3x "
                                   "forward), LoRA training ~4N (2x forward), generate = prefill + each decode step."),
    ("achieved_tflops", "float64", "model_flops_per_step / seconds per step / 1e12."),
    ("compute_precision", "string", "Precision the model's FLOPs ran at: bf16 (bfloat16 cells), tf32 or fp32; mixed "
                                    "when its matmuls and convolutions ran at different ones (then peak_tflops counts "
                                    "each part's FLOPs at its own peak)."),
    ("matmul_compute_precision", "string", "Precision of the matmul (and attention) FLOPs: bf16, tf32 or fp32."),
    ("conv_compute_precision", "string", "Precision of the convolution FLOPs (null when the model has none)."),
    ("conv_flops_per_step", "float64", "The convolution part of model_flops_per_step."),
    ("peak_tflops", "float64", "Ceiling for compute_precision: the GPU's dense datasheet figure, or on a CPU an fp32 "
                               "GEMM measured once per run (in the first cell, after its timed window)."),
    ("peak_source", "string", "Where peak_tflops comes from: 'table: <GPU> (<datasheet>)' or 'measured fp32 GEMM ...'; "
                              "'none: a MIG slice ...' when the cell ran on a MIG slice (no peak: the datasheet's "
                              "is the whole GPU's); null when the GPU is not in the table or has no unit for the "
                              "precision."),
    ("pct_of_peak", "float64", "100 x achieved_tflops / peak_tflops."),
    ("precision_suspect", "bool", "True if pct_of_peak > 100: the row cannot have run at its declared precision "
                                  "(e.g. 'fp32' that was really TF32)."),
    ("bytes_per_step", "float64", "generate: bytes one step must read (bf16 weights once per forward pass + the KV "
                                  "cache each pass reads)."),
    ("pct_of_bandwidth", "float64", "generate: 100 x bytes_per_step / seconds per step / the GPU's memory bandwidth "
                                    "(MBU); null on a CPU."),
    ("energy_status", "string", "ok (NVML energy counter read around the timed window), unsupported (the GPU has no "
                                "energy counter), window_too_short (the timed window was under 1 s: the counter "
                                "updates every ~20-100 ms, too coarse for a shorter one), mig (the cell ran on a MIG "
                                "slice: the counter is the whole GPU's), nvml_unavailable (NVML could not start in "
                                "the cell's environment, or did not find the cell's GPU); energy columns stay null, "
                                "never 0, unless ok; null on a CPU. On several GPUs: ok only when every GPU's reading "
                                "is, else the status of a GPU without one (extra.energy_reason names it)."),
    ("energy_j", "float64", "GPU energy over the timed window, joules (NVML total energy consumption delta); on "
                            "several GPUs the sum over all of them (each GPU's in extra.energy_gpus)."),
    ("joules_per_step", "float64", "energy_j / timed_steps."),
    ("joules_per_token", "float64", "generate: energy_j / (timed_steps x batch_size x tokens_generated)."),
    ("mean_power_w", "float64", "energy_j / timed window seconds (on several GPUs: their summed power)."),
    ("sm_clock_mhz", "float64", "SM clock at the end of the timed window (NVML), MHz; on several GPUs the lowest."),
    ("gpu_temp_c", "float64", "GPU temperature at the end of the timed window (NVML), degrees C; on several GPUs "
                              "the highest."),
    ("throttle_reasons", "string", "NVML clock-throttle reasons active at the end of the timed window, comma-separated "
                                   "(empty = none; idle is not a throttle); on several GPUs, any GPU's."),
    ("library_versions", "string", "JSON object: distribution -> version for the tracked libraries."),
    ("sweep_point", "string", "Identity: the version-sweep point the row measured (`fwbench sweep`/`bisect`): "
                              "'PACKAGE==VERSION' (the pin set's environment with that one package at that version) "
                              "or 'date:YYYY-MM-DD' (every package as the index had it that day); null: no sweep."),
    ("sweep_installed", "string", "Sweep rows: what the point's environment really installed, read from it: "
                                  "'PACKAGE==VERSION' for a package point, then the family it moved with it "
                                  "('jax==0.10.1; jaxlib==0.10.1'; '; '-separated top-level requirements for a "
                                  "date point); a package point whose installed version is not the one asked "
                                  "for is never measured (status error, SweepVersionMismatch)."),
    ("devices", "int64", "Identity: the devices a fit ran data-parallel on (--devices; 1: one device, as every row "
                         "before schema v9, which read as 1). On a CPU these are logical devices sharing the "
                         "cell's cores: such rows check correctness, they make no speed claim."),
    ("per_device_batch", "int64", "Samples each device processed per step (weak scaling: the task's batch; strong: "
                                  "global_batch / devices)."),
    ("global_batch", "int64", "Samples one step processed over all devices (per_device_batch x devices)."),
    ("global_batch_setting", "int64", "Identity: --global-batch asked for (strong scaling); null: weak scaling, the "
                                      "task's batch on each device."),
    ("comm_backend", "string", "Data-parallel rows (devices > 1): the collectives that reduced the gradients: gloo "
                               "or nccl (torch DistributedDataParallel), xla-collectives (JAX SPMD), tf-<cross-device "
                               "ops> (MirroredStrategy's choice, e.g. tf-CollectiveAllReduce); null on one device."),
    ("comm_backend_version", "string", "Data-parallel rows: the version of those collectives: nccl <version> (the NCCL "
                                       "torch loaded), gloo (built into torch <version>), xla-collectives (jaxlib "
                                       "<version>), tf-... (tensorflow <version>); null on one device."),
    ("interconnect", "string", "Data-parallel rows on GPUs: each pair of the cell's GPUs (by position in the cell) "
                               "with its link in nvidia-smi topo -m's words: NV<k> (NVLink, k active links), or the "
                               "PCIe path PIX, PXB, PHB, NODE, SYS, e.g. '0-1 NV18'; null on a CPU, on one device, "
                               "or where NVML cannot say (extra.nvidia_smi_topo: the matrix nvidia-smi printed)."),
    ("model_sha256", "string", "Identity: SHA-256 of the model file a `fwbench run --model` row ran (an edited file "
                               "is a new cell); null: a registry task."),
    ("model_file", "string", "The model file's path as the cell imported it (--model rows; not part of the identity: "
                             "model_sha256 is)."),
    ("twin_params_keras", "int64", "native-torch rows of a model file: the trainable parameters of the file's Keras "
                                   "model the PyTorch twin was checked against (null: not checked; extra.twin_check "
                                   "says why)."),
    ("twin_params_match", "bool", "native-torch rows of a model file: True if the twin has as many trainable "
                                  "parameters as the Keras model, False if not (then it is not the same model), null "
                                  "when not checked."),
    ("steps_per_execution", "int64", "Identity: Keras compile(steps_per_execution=N) (--steps-per-execution, model "
                                     "files): N steps per call of the compiled step; the clock is read around each "
                                     "call, so step_ms holds one entry per call (its mean per step). 1: one a call."),
    ("extra", "string", "JSON object: anything else (graph-break reasons, notes; phases_s: the cell process's "
     "start-up phases; process_s: the process as the runner timed it; gpu_indices: the NVML indices of every GPU the "
     "runner gave the cell; energy_gpus: on several GPUs, each one's energy reading by UUID, in that order; "
     "energy_reason: why such a row has no energy; gpu_busy: on a GPU, NVML's utilization samples over the timed "
     "window (status; mean_pct: the share of each sampling period a kernel ran, averaged; samples; covered_s; "
     "per_gpu on several GPUs); process_settings: the thread pools' variables the cell process "
     "found and the garbage collector's state in its timed window; compile_cache: the folder of JAX's persistent "
     "compilation cache the cell used; context_switches: the cell process's context switches in its timed window, "
     "involuntary (preemptions: a thread waited for a core) and voluntary (waits), all its threads, from getrusage)."),
)

COLUMN_NAMES = tuple(name for name, _, _ in COLUMNS)


def markdown_table() -> str:
    """The column table of docs/results-schema.md (regenerate with `python -m fwbench.core.schema`)."""
    lines = ["| column | type | meaning |", "|---|---|---|"]
    lines += [f"| `{name}` | {kind} | {doc} |" for name, kind, doc in COLUMNS]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
