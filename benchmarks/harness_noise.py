"""The harness's own run-to-run spread: fresh-process fwbench cells against a plain script timing the same call.

    python benchmarks/harness_noise.py                      # five stacks x bert-predict, bert-fit at tiny
    python benchmarks/harness_noise.py --stack native-torch --task bert-predict --runs 8
    python benchmarks/harness_noise.py --stack native-torch --task bert-predict --candidate parent-poll

For each cell, `--runs` rounds; a round is one `fwbench run` of the cell (a new cell process, --repeats 1) and one
run of benchmarks/plain_cell.py (a new process in the same stack environment, building the same model from the
same inputs and timing the same call with a bare synced loop), in alternating order so that drift hits both
alike. Prints, per cell: each side's mean ms/step and process-to-process coefficient of variation, and the mean
ratio fwbench/plain (geometric mean of the rounds' ratios) with its 95% interval; below the table, each side's
preemptions (involuntary context switches of its process in the timed window, per step) and how closely its rounds'
times followed them (what a slow round on a quiet machine was made of). Targets (issue: a quiet
harness): fwbench's CV at most 1.5x the plain script's, and the ratio within 1.02 (either way); the verdict, one
per target, says "meets" or "misses" only where its 95% interval decides it, else "undecided". Time it on a quiet machine:
a row of fwbench's that met competition is counted and said (busy), and the figures are then not worth reporting.

--candidate NAME measures one thing a harness does that a plain script does not (CANDIDATES), one at a time: the
plain script with it against the plain script, in the same alternating rounds.

--compile-cache gives fwbench's cells the persistent compilation cache a user can ask for (FWBENCH_COMPILE_CACHE: a
folder of the benchmark's own, which the first round fills and later rounds load their programs from); by default a
cell compiles its programs, as the plain script does.

--extend FILE adds --runs rounds to the cells of an earlier run's --json file and judges all its rounds together. Each
such look at the same rounds is one more chance of a verdict by luck, so the k-th look's intervals are at
1 - 0.05/2^(k-1) (95%, 97.5%, 98.75%, ...): a wrong "meets" (or "misses") at a target's boundary, 2.5% of cells
judged once, stays under 5% over any number of looks (their levels sum so), and simulated, 3.2% over two looks and
3.5% over three, against 4.1% and 5.6% had each look been at 95% (benchmarks/harness_noise_looks.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS.parent / "runner"))

STACKS = ("native-torch", "keras3-jax", "keras3-tensorflow", "keras3-torch", "keras2-tensorflow")
TASKS = ("bert-predict", "bert-fit")
CV_TARGET, RATIO_TARGET = 1.5, 1.02
ALPHA = 0.05  # the first look's two-sided level; later looks (--extend) halve it each time
# What a harness does that a plain script does not, measured one at a time (--candidate): the plain script with it.
CANDIDATES = {
    "parent-poll": "its parent waits by polling (Popen.wait with a timeout: a wake-up every 50 ms at most), as "
                   "fwbench's runner did",
    "gc-freeze": "gc.collect() and gc.freeze() run after the build, before the first step",
    "threads": "a fwbench cell's thread settings on every core apply: its variables (OMP_NUM_THREADS, MKL_NUM_THREADS, "
               "TF_NUM_INTRAOP_THREADS, TF_NUM_INTEROP_THREADS) and its backend's configure()",
    "compile-cache": "the framework's persistent compilation cache is on as a fwbench cell turns it on (JAX: "
                     "jax_compilation_cache_dir, every program cached), in a folder of the benchmark's own that its "
                     "first round fills and later rounds load their programs from",
    "cell-imports": "fwbench's cell module is imported first (everything a cell process imports before the "
                    "framework: its probes, records, environment facts), and nothing of it run",
    # The cell process's two halves inside the plain script, to tell which one a gap is in:
    "cell-build": "the model is built by the cell's own build_cell() (its checks, framework set-up, compile cache, "
                  "configure(), build and sync; the spec the cell process gets) and timed by the plain loop",
    "cell-clock": "the model is built plainly and timed by the cell's own time_cell() (its StepClock, with the "
                  "contention and energy probes read at the window's edges)",
    # Two halves of the whole harness, to tell which one a gap between fwbench and the plain script is in:
    "cell-process": "the process is fwbench's own cell process (python -m fwbench.harness.cell: its build, probes, "
                    "clock and record), started as the plain script is (the plain environment, no runner)",
    "cell-launch": "the process is fwbench's own cell process started as the runner starts it (its environment, new "
                   "session, preexec, log file: fwbench.engines.launch_process), without the runner's CLI around it",
}


def involuntary(extra: dict | str | None) -> int | None:
    """The preemptions of a row's (or the plain script's) timed window; None where it does not say."""
    if isinstance(extra, str):
        extra = json.loads(extra)
    return ((extra or {}).get("context_switches") or {}).get("involuntary")


def fwbench_ms(stack: str, task: str, args, data: Path, out: Path) -> tuple[float, bool, int | None]:
    """One fresh fwbench cell: (ms_per_step, busy, preemptions in its window)."""
    from fwbench.core import results

    env = {key: value for key, value in os.environ.items() if key != "FWBENCH_COMPILE_CACHE"}
    if args.compile_cache:  # one folder for all rounds: the first fills it
        env["FWBENCH_COMPILE_CACHE"] = str(out.parent / "fwbench-compile-cache")
    done = subprocess.run([sys.executable, "-m", "fwbench.cli", "run", "--engine", "local", "--stack", stack,
                           "--task", task, "--preset", "tiny", "--repeats", "1", "--steps", str(args.steps),
                           "--warmup", str(args.warmup), "--device", "cpu", "--data", str(data), "--out", str(out),
                           "--no-resume"], capture_output=True, text=True, env=env)
    rows = [results.read_row(p) for p in out.rglob("*.parquet")]
    if done.returncode != 0 or len(rows) != 1 or rows[0]["status"] != "ok":
        sys.exit(f"fwbench run {stack} {task} failed:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
    for path in out.rglob("*.parquet"):  # the next round writes a fresh row
        path.unlink()
    return float(rows[0]["ms_per_step"]), bool(rows[0]["busy"]), involuntary(rows[0]["extra"])


def plain_ms(python: Path, stack: str, task: str, args, data: Path,
             candidate: str | None = None) -> tuple[float, int | None]:
    """One fresh plain_cell.py: (ms_per_step, preemptions in its window); with a candidate (CANDIDATES), the plain
    script with that one thing of a harness."""
    from fwbench.engines import keras_environment
    from fwbench.engines.device import hide_gpus

    # The stack's own switches (KERAS_BACKEND ...) and no GPU, as a user's script on this CPU would have them.
    env = hide_gpus({**os.environ, **keras_environment(stack)})
    if candidate in ("cell-process", "cell-launch"):
        return cell_process_ms(python, stack, task, args, data, env, launched=candidate == "cell-launch")
    command = [str(python), str(BENCHMARKS / "plain_cell.py"), "--stack", stack, "--task", task, "--data", str(data),
               "--steps", str(args.steps), "--warmup", str(args.warmup)]
    if candidate == "gc-freeze":
        command.append("--gc-freeze")
    if candidate == "cell-imports":
        command.append("--import-cell")
    if candidate in ("cell-build", "cell-clock"):
        command.append(f"--{candidate}")
    if candidate == "compile-cache":
        command += ["--compile-cache", str(data.parent / "compile-cache")]
    if candidate == "threads":
        from fwbench.core.cpusets import THREAD_VARIABLES
        from fwbench.core.spec import CellSpec
        from fwbench.engines import cell_settings

        threads = os.cpu_count() or 1  # what `fwbench run` gives a cell on this machine
        settings = cell_settings(CellSpec(stack=stack, task=task, preset="tiny", compile_mode="", data_dir=str(data),
                                          steps=args.steps, threads=threads))
        env.update({name: settings[name] for name in THREAD_VARIABLES})
        command += ["--configure-threads", str(threads)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env)
        if candidate == "parent-poll":
            process.wait(timeout=24 * 3600)  # as fwbench's runner waited until 2026-11: polling, every 50 ms at most
        else:
            process.wait()  # blocked in the kernel until the child exits
        out.seek(0), err.seek(0)
        if process.returncode != 0:
            sys.exit(f"plain_cell.py {stack} {task} failed:\n{err.read()[-2000:]}")
        printed = json.loads(out.read().strip().splitlines()[-1])
        return float(printed["ms_per_step"]), involuntary(printed)


def cell_process_ms(python: Path, stack: str, task: str, args, data: Path, plain_env: dict[str, str], *,
                    launched: bool) -> tuple[float, int | None]:
    """One fresh fwbench cell process (the candidates cell-process and cell-launch) on the spec the plain script
    builds its model from; started plainly, or (launched) by the runner's own launch_process."""
    from fwbench.core import registry
    from fwbench.core.spec import CellSpec
    from fwbench.engines import cell_environment, launch_process, write_spec
    from fwbench.engines.local import with_this_checkout

    spec = CellSpec(stack=stack, task=task, preset="tiny", compile_mode=registry.get_stack(stack).compile_modes[0],
                    data_dir=str(data), steps=args.steps, warmup=args.warmup, threads=os.cpu_count() or 1,
                    device="cpu", device_setting="cpu")
    with tempfile.TemporaryDirectory(prefix="fwbench-noise-cell-") as work_dir:
        work = Path(work_dir)
        spec_path, record_path, log_path = write_spec(spec, work), work / "record.json", work / "cell.log"
        argv = [str(python), "-m", "fwbench.harness.cell", str(spec_path), str(record_path)]
        if launched:
            launch_process(argv, spec, record_path, log_path, with_this_checkout(cell_environment(spec)))
        else:
            with open(log_path, "wb") as log:
                subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=plain_env)
        record = json.loads(record_path.read_text()) if record_path.is_file() else {}
        if record.get("status") != "ok":
            sys.exit(f"the cell process {stack} {task} failed ({record.get('status')}):\n"
                     f"{record.get('error_message') or log_path.read_text()[-2000:]}")
        return float(record["ms_per_step"]), involuntary(record.get("extra"))


def look_confidence(look: int) -> float:
    """The intervals' level at the look-th look at a cell's rounds: 95%, 97.5%, 98.75%, ..."""
    return 1 - ALPHA / 2 ** (look - 1)


def read_earlier(parser, args) -> dict[tuple[str, str], dict]:
    """The cells of an earlier --json file, by (stack, task); a clear error where they cannot be extended as asked."""
    try:
        earlier = json.loads(args.extend.read_text())
        rows = earlier["rows"] if isinstance(earlier, dict) else earlier  # older files: the rows alone
        found = {(row["stack"], row["task"]): row for row in rows}
        for row in rows:
            if len(row["fwbench_runs_ms"]) != len(row["plain_runs_ms"]) or not row["fwbench_runs_ms"]:
                raise ValueError(f"{row['stack']} {row['task']} has no paired rounds")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        parser.error(f"--extend {args.extend}: not a --json file of this benchmark ({exc})")
    for row in rows:  # the added rounds must time what the earlier ones did (older files: the defaults then)
        for name in ("candidate", "steps", "warmup", "compile_cache"):
            default = parser.get_default(name)
            if name == "compile_cache" and not row.get("candidate"):
                default = True  # a file older than --compile-cache: its cells had the cache (the default then)
            was = row.get(name, default)
            if was != getattr(args, name):
                option = "--" + name.replace("_", "-")
                said = (f"{'with' if was else 'without'} {option}" if isinstance(was, bool)
                        else f"with {option} {was}, not {getattr(args, name)}")
                parser.error(f"--extend {args.extend}: its {row['stack']} {row['task']} rounds ran {said}")
    if args.stack or args.task:
        parser.error("--extend runs the cells of its file: give no --stack or --task")
    return found


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else math.nan


def ratio_interval(harness: list[float], plain: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean of the paired rounds' ratios, with a t interval on their logs (95% unless said)."""
    logs = [math.log(h / p) for h, p in zip(harness, plain)]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    from scipy import stats as sps  # the aggregator's t quantiles (compare, verify)

    half = float(sps.t.ppf(1 - (1 - confidence) / 2, len(logs) - 1)) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def measure_cell(stack: str, task: str, python: Path, args, data: Path, work: Path, *,
                 earlier: dict | None = None) -> dict:
    """args.runs rounds of the two sides, alternating which goes first. The first side is fwbench's cell, or, with
    --candidate, the plain script with that candidate. With `earlier` (a row of an earlier --json), its rounds come
    first and the new ones are added: one more look at them."""
    earlier = earlier or {}
    harness, plain = list(earlier.get("fwbench_runs_ms", [])), list(earlier.get("plain_runs_ms", []))
    # Each round's preemptions, aligned with its times (None: an older file's rounds, or a process that did not say)
    harness_preempted = list(earlier.get("fwbench_runs_involuntary") or [None] * len(harness))
    plain_preempted = list(earlier.get("plain_runs_involuntary") or [None] * len(plain))
    busy = earlier.get("busy_rows", 0)
    looks = earlier.get("looks", 1) + 1 if earlier else 1  # an older file's rounds had one look
    label = args.candidate or "fwbench"
    for round_index in range(len(harness), len(harness) + args.runs):
        sides = ("first", "plain") if round_index % 2 == 0 else ("plain", "first")
        for side in sides:
            if side == "plain":
                ms, preempted = plain_ms(python, stack, task, args, data)
                plain.append(ms)
                plain_preempted.append(preempted)
                continue
            if args.candidate:
                ms, preempted = plain_ms(python, stack, task, args, data, args.candidate)
            else:
                ms, was_busy, preempted = fwbench_ms(stack, task, args, data, work / f"{stack}-{task}")
                busy += was_busy
            harness.append(ms)
            harness_preempted.append(preempted)
        print(f"  {stack} {task} round {round_index + 1}: {label} {harness[-1]:.3f}  plain {plain[-1]:.3f} ms/step",
              file=sys.stderr, flush=True)
    confidence = look_confidence(looks)
    ratio, low, high = ratio_interval(harness, plain, confidence)
    spread, spread_low, spread_high = spread_ratio_interval(harness, plain, confidence)
    return {"stack": stack, "task": task, "runs": len(harness), "looks": looks, "confidence": confidence,
            "candidate": args.candidate, "steps": args.steps, "warmup": args.warmup,
            "compile_cache": args.compile_cache,
            "fwbench_ms": statistics.fmean(harness),
            "plain_ms": statistics.fmean(plain), "fwbench_cv": cv(harness), "plain_cv": cv(plain),
            "ratio": ratio, "ratio_low": low, "ratio_high": high, "spread_ratio": spread,
            "spread_ratio_low": spread_low, "spread_ratio_high": spread_high, "busy_rows": busy,
            "fwbench_runs_ms": harness, "plain_runs_ms": plain,
            "fwbench_runs_involuntary": harness_preempted, "plain_runs_involuntary": plain_preempted}


def spread_ratio_interval(harness: list[float], plain: list[float],
                          confidence: float = 0.95) -> tuple[float, float, float]:
    """The ratio of the two sides' process-to-process spreads (standard deviations of log ms/step, which is the CV
    for spreads this small) with its interval (95% unless said), from the F distribution: with 5 runs a side a 95%
    interval spans about 3x either way, so a CV ratio is decided only from many runs."""
    from scipy import stats as sps

    logs_h, logs_p = [math.log(v) for v in harness], [math.log(v) for v in plain]
    ratio = statistics.stdev(logs_h) / statistics.stdev(logs_p)
    upper = 1 - (1 - confidence) / 2
    low = ratio / math.sqrt(float(sps.f.ppf(upper, len(logs_h) - 1, len(logs_p) - 1)))
    high = ratio * math.sqrt(float(sps.f.ppf(upper, len(logs_p) - 1, len(logs_h) - 1)))
    return ratio, low, high


def verdicts(row: dict) -> tuple[str, str]:
    """(spread, ratio): against each target, only as far as its interval decides: "meets" when the interval lies
    inside the target, "misses" when it lies outside, else "undecided" (at this many runs). Busy rows void both."""
    if row["busy_rows"]:
        return (f"void: {row['busy_rows']} busy row(s)",) * 2
    spread_low, spread_high = row["spread_ratio_low"], row["spread_ratio_high"]
    spread = "misses" if spread_low > CV_TARGET else "undecided" if spread_high > CV_TARGET else "meets"
    low, high = row["ratio_low"], row["ratio_high"]
    ratio = ("misses" if high < 1 / RATIO_TARGET or low > RATIO_TARGET
             else "undecided" if low < 1 / RATIO_TARGET or high > RATIO_TARGET else "meets")
    return spread, ratio


def verdict(row: dict) -> str:
    """Both verdicts in one line of the table."""
    spread, ratio = verdicts(row)
    return spread if row["busy_rows"] else f"spread {spread}, ratio {ratio}"


def table_lines(rows: list[dict], label: str) -> list[str]:
    levels = {row.get("confidence", 1 - ALPHA) for row in rows}
    level = f"{100 * levels.pop():.4g}%" if len(levels) == 1 else "CI"  # mixed looks: each row's in the JSON
    lines = [f"targets: {label}'s CV at most {CV_TARGET}x plain's (spread), {label}/plain within {RATIO_TARGET} (ratio)",
             f"{'stack':<18} {'task':<13} {label + ' ms':>14} {'plain ms':>9} {label + ' CV':>14} {'plain CV':>8} "
             f"{'spread [' + level + ']':>19} {'ratio [' + level + ']':>22}  verdict"]
    for row in rows:
        lines.append(f"{row['stack']:<18} {row['task']:<13} {row['fwbench_ms']:>14.3f} {row['plain_ms']:>9.3f} "
                     f"{row['fwbench_cv']:>14.1%} {row['plain_cv']:>8.1%} "
                     f"{row['spread_ratio']:>6.2f} [{row['spread_ratio_low']:.2f}, {row['spread_ratio_high']:.2f}] "
                     f"{row['ratio']:>7.3f} [{row['ratio_low']:.3f}, {row['ratio_high']:.3f}]  {verdict(row)}")
    return lines


def preemption_lines(rows: list[dict], label: str) -> list[str]:
    """Per cell, each side's preemptions per timed step (mean over its rounds) and the correlation of its rounds'
    log times with them: on a quiet machine, whether its slow rounds were ones whose threads waited for a core.
    Nothing where no round says (files of older runs)."""
    lines = []
    for row in rows:
        sides = [f"{side} {preemption_summary(row, name)}" for side, name in ((label, "fwbench"), ("plain", "plain"))]
        lines.append(f"{row['stack']:<18} {row['task']:<13} " + ", ".join(sides))
    said = any(count is not None for row in rows for name in ("fwbench", "plain")
               for count in row.get(f"{name}_runs_involuntary") or [])
    heading = ("preemptions per timed step (involuntary context switches of the process in its timed window), "
               "and r: their correlation with the rounds' log ms/step")
    return [heading, *lines] if said else []


def preemption_summary(row: dict, side: str) -> str:
    pairs = [(math.log(ms), count / row["steps"])
             for ms, count in zip(row[f"{side}_runs_ms"], row.get(f"{side}_runs_involuntary") or []) if count is not None]
    if len(pairs) < 3:
        return f"not said ({len(pairs)} rounds say)"
    times, per_step = zip(*pairs)
    try:
        correlation = f"r={statistics.correlation(times, per_step):.2f}"
    except statistics.StatisticsError:  # one side's values all alike
        correlation = "r undefined"
    return f"{statistics.fmean(per_step):.2f} ({correlation}, {len(pairs)} rounds)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", action="append", choices=STACKS, help="repeatable (default: all five)")
    parser.add_argument("--task", action="append", choices=TASKS, help="repeatable (default: both)")
    parser.add_argument("--runs", type=int, default=5, help="rounds per cell (default 5)")
    parser.add_argument("--steps", type=int, default=100, help="timed steps per run (default 100)")
    parser.add_argument("--warmup", type=int, default=10, help="warm-up steps per run (default 10)")
    parser.add_argument("--candidate", choices=CANDIDATES, help="measure one candidate source of noise instead of "
                        "fwbench: the plain script with it against the plain script (" + "; ".join(
                            f"{name}: {what}" for name, what in CANDIDATES.items()) + ")")
    parser.add_argument("--compile-cache", action="store_true", help="fwbench's cells with a persistent "
                        "compilation cache (FWBENCH_COMPILE_CACHE), which the first round fills and later rounds load "
                        "their programs from; by default each cell compiles them, as the plain script does")
    parser.add_argument("--json", type=Path, help="also write every run's figures here, with the date, machine, "
                        "command and commit (benchmarks/measurement_log.py; its place: benchmarks/results/"
                        "<date>-<machine>/harness-noise.json)")
    parser.add_argument("--extend", type=Path, metavar="FILE",
                        help="add --runs rounds to the cells of this earlier --json file and judge them all together "
                        "(its intervals widened for the repeated look)")
    return parser


def main() -> int:
    parser = build_parser()
    args = parser.parse_args()
    if args.runs < 2:
        parser.error("--runs must be at least 2 (a spread needs two runs)")
    if args.compile_cache and args.candidate:
        parser.error("--compile-cache is for fwbench's cells; a --candidate round runs none")
    earlier = read_earlier(parser, args) if args.extend else {}

    from datetime import datetime, timezone

    import measurement_log
    from fwbench.core import data as shared_data
    from fwbench.engines.local import StackEnvironment
    from fwbench.harness.envinfo import cpu_model

    started = measurement_log.now()
    work = Path(tempfile.mkdtemp(prefix="fwbench-noise-"))
    cells = list(earlier) or [(stack, task) for stack in args.stack or STACKS for task in args.task or TASKS]
    shared_data.generate(work / "data", "tiny", tasks=sorted({task for _, task in cells}))
    rows = []
    for stack in dict.fromkeys(stack for stack, _ in cells):
        environment = StackEnvironment(stack)
        environment.build()
        for task in [task for cell_stack, task in cells if cell_stack == stack]:
            rows.append(measure_cell(stack, task, environment.python, args, work / "data", work,
                                     earlier=earlier.get((stack, task))))
    cpu = cpu_model()  # with its family and model: a VM may name every generation alike ("AMD EPYC")
    runs = f"{rows[0]['runs']} rounds" if len({row["runs"] for row in rows}) == 1 else "the rounds below"
    print(f"harness noise, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {cpu}, {os.cpu_count()} cores; "
          f"tiny, {runs} of one fresh process a side, {args.warmup} warm-up + {args.steps} timed steps")
    if earlier:
        looks = max(row["looks"] for row in rows)
        print(f"extends {args.extend} ({args.runs} new rounds a cell): look {looks} at these rounds, its intervals at "
              f"{look_confidence(looks):.4g} (each look halves the level's error: this file's docstring says why)")
    label = args.candidate or "fwbench"
    if args.candidate:
        print(f"candidate {args.candidate}: the plain script where {CANDIDATES[args.candidate]}")
    if args.compile_cache:
        print("fwbench's cells with a compilation cache (FWBENCH_COMPILE_CACHE): all but the first round load their "
              "programs from it")
    print("\n".join(table_lines(rows, label) + preemption_lines(rows, label)))
    if args.json:
        measurement_log.write(args.json, json_record(rows, args, started))
    return 0


def json_record(rows: list[dict], args, started) -> dict:
    """The run's --json file: measurement_log's shape, each row with its two verdicts (what the table printed)."""
    import measurement_log

    for row in rows:
        row["spread_ratio_verdict"], row["ratio_verdict"] = verdicts(row)
    settings = {"preset": "tiny", "rounds added" if args.extend else "rounds": args.runs,
                "warm-up steps": args.warmup, "timed steps": args.steps}
    if args.candidate:
        settings["candidate"] = f"{args.candidate}: the plain script where {CANDIDATES[args.candidate]}"
    if args.compile_cache:
        settings["compile cache"] = "on (FWBENCH_COMPILE_CACHE)"
    if args.extend:
        settings["extends"] = str(args.extend)
    return measurement_log.record(
        "harness_noise.py", rows, started=started, settings=settings,
        target=f"fwbench's CV at most {CV_TARGET}x the plain script's (spread), fwbench/plain within {RATIO_TARGET} "
               f"either way (ratio)")


if __name__ == "__main__":
    sys.exit(main())
