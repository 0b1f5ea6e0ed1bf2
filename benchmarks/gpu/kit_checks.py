"""The GPU checks of issues 17 and 25: does what the harness claims on a GPU really happen there? Each check runs a
native-torch cell (default bert-predict at the kit's preset; TF32 and the Trainer at `tiny`) through the CLI and
reads its row, or reads the rows the kit's runs left:

  per-step sync      a cell timed without the per-step sync must differ from the synced one (tiny sizes)
  TF32               --tf32 default, on and off are each recorded as set, for matmuls and convolutions apart
                     (effective on an Ampere or newer GPU), and none of them fails the cell
  compiled Trainer   a reduce-overhead Trainer fit (bert-fit) runs, and its compile took effect
  CUDA graphs        reduce-overhead compiled and replayed CUDA graphs (no cudagraph skips), on its own cell and
                     on every compiled kit row (compile_took_effect true)
  GPUs, by UUID      every ok row ran on a GPU (no CPU fallback), saw exactly the GPUs it asked for (one, or the N
                     of a --devices N cell, each its own) and names its first by the UUID NVML gives its index
  peak memory        every ok row (checks and kit rows) has a peak memory figure
  busy               a competing GPU process marks the row busy
  energy             the energy columns are filled wherever the window was long enough for NVML's counter

A check that needs a GPU says SKIP on a machine without one. Lines go to stdout and to checks.txt.

What one GPU without Docker cannot prove, and so no check here claims (on a host with several GPUs the check above
does see each cell's share, for the kit's own placement): that a cell sees one GPU when the host has several
(slots, docker device requests by id, compose `count: 1`, Slurm's --gres; tested with the GPUs mocked), that a
container or a scheduler's CUDA_VISIBLE_DEVICES of UUIDs or MIG ids finds the right NVML handle (mocked in
tests/test_gpu_identity.py), that TensorFlow holds no GPU memory in Keras JAX/PyTorch cells (the kit's host has no
TensorFlow), and doctor's Docker checks (NVIDIA Container Toolkit, a GPU inside a container).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from fwbench.core.atomic import write_atomically
from fwbench.core.precision import TF32_AS_PRECISION

import run_kit
from kit_plan import Unit

# Synced and unsynced ms/step closer than this are taken as equal (a sync that does nothing).
SYNC_MIN_DIFFERENCE = 0.01
SYNC_STEPS = 200
COMPETITOR = ("import sys, time, torch\n"
              "x = torch.randn(4096, 4096, device='cuda')\n"
              "print('ready', flush=True)\n"
              "end = time.time() + float(sys.argv[1])\n"
              "while time.time() < end:\n"
              "    (x @ x).sum().item()\n")


def on_gpu() -> bool:
    from fwbench.harness.envinfo import nvml_info

    return bool(nvml_info().get("gpu_names"))


class Checks:
    def __init__(self, args):
        self.args, self.lines, self.failed = args, [], False
        self.folder = args.out / "checks"
        self.gpu = on_gpu()

    def say(self, verdict: str, name: str, detail: str) -> None:
        self.failed |= verdict == "FAIL"
        line = f"{verdict:<4} {name}: {detail}"
        self.lines.append(line)
        print(line, flush=True)

    def cell(self, name: str, mode: str = "none", extra: list[str] | None = None, *,
             preset: str | None = None, task: str | None = None, precision: str = "published") -> dict | None:
        """precision: what the cell's options amount to (--tf32 on is tf32), so that its row is found."""
        rows = self.folder / name
        if rows.exists():
            shutil.rmtree(rows)  # a check measures now, never an earlier row
        unit = Unit("native-torch", mode, task or self.args.task, 0, precision)
        row = run_kit.run_unit(unit, self.args, self.args.cell_timeout, extra, rows=rows, preset=preset)
        return row

    @staticmethod
    def ok(row: dict | None) -> bool:
        return bool(row) and row.get("status") == "ok"

    @staticmethod
    def why(row: dict | None) -> str:
        if not row:
            return "no row written (see kit.log)"
        return f"status {row['status']}: {(row.get('error_message') or '').splitlines()[0][:160] if row.get('error_message') else ''}"

    def sync(self) -> dict | None:
        # At the tiny preset a step is launch-bound on a GPU: without the per-step sync the host queues the
        # next steps while the GPU runs, with it every step waits. A sync that did nothing would time both alike.
        if not self.gpu:
            # Not run: on a CPU the verdict can only be SKIP (the harness's sync is tested on the CPU elsewhere).
            self.say("SKIP", "per-step sync", "no GPU (a CPU sync waits for nothing): not run")
            return None
        steps = ["--steps", str(SYNC_STEPS)]  # the CLI takes an option's last value
        synced = self.cell("sync-on", extra=steps, preset="tiny")
        unsynced = self.cell("sync-off", extra=[*steps, "--no-per-step-sync"], preset="tiny")
        if not (self.ok(synced) and self.ok(unsynced)):
            self.say("FAIL", "per-step sync", f"synced {self.why(synced)}; unsynced {self.why(unsynced)}")
            return synced
        a, b = synced["ms_per_step"], unsynced["ms_per_step"]
        detail = (f"{a:.3f} ms/step synced every step, {b:.3f} without (ratio {b / a:.3f}); "
                  f"step_ms {'kept' if synced.get('step_ms') else 'missing'} / "
                  f"{'null' if unsynced.get('step_ms') is None else 'present'}")
        recorded = synced.get("per_step_sync") is True and unsynced.get("per_step_sync") is False
        if not self.gpu:
            self.say("SKIP", "per-step sync", "no GPU (a CPU sync waits for nothing): " + detail)
        elif recorded and abs(b - a) / a >= SYNC_MIN_DIFFERENCE and unsynced.get("step_ms") is None:
            self.say("PASS", "per-step sync", detail)
        else:
            self.say("FAIL", "per-step sync", detail + (" (per_step_sync not recorded as asked)" if not recorded else ""))
        return synced

    def tf32(self) -> None:
        """Each --tf32 setting reaches matmuls and convolutions as asked (PyTorch's own default: matmuls strict
        FP32, cuDNN convolutions TF32), is read back without the legacy/new API clash raising, and on an Ampere
        or newer GPU is effective exactly where allowed. At `tiny`: the state, not the speed, is checked."""
        name = "TF32 recorded as set"
        expected = {"default": (False, True), "on": (True, True), "off": (False, False)}  # (matmul, conv)
        details, wrong = [], []
        for setting, (matmul, conv) in expected.items():
            row = self.cell(f"tf32-{setting}", extra=["--tf32", setting], preset="tiny",
                            precision=TF32_AS_PRECISION[setting])
            if not self.ok(row):
                wrong.append(f"--tf32 {setting}: {self.why(row)}")
                continue
            seen = (row.get("tf32_matmul"), row.get("tf32_conv"))
            effective = (row.get("tf32_effective"), row.get("tf32_conv_effective"))
            details.append(f"{setting}: matmul {seen[0]}/{effective[0]}, conv {seen[1]}/{effective[1]}")
            # A CPU never runs TF32: there the flags are recorded and nothing is effective.
            wanted_effective = (matmul, conv) if self.gpu else (False, False)
            if row.get("tf32_setting") != setting or seen != (matmul, conv) or effective != wanted_effective:
                wrong.append(f"--tf32 {setting}: allowed {seen}, effective {effective}, expected {(matmul, conv)} "
                             f"and {wanted_effective}")
        detail = "allowed/effective " + "; ".join(details) + (" | wrong: " + "; ".join(wrong) if wrong else "")
        self.say("FAIL" if wrong else "PASS", name, detail)

    def compiled_trainer(self) -> dict | None:
        """The cells most likely to meet the TF32 API clash in Inductor: a Trainer fit with torch_compile."""
        name = "compiled Trainer fit runs"
        if not self.gpu:
            self.say("SKIP", name, "no GPU (a CPU compile proves nothing about CUDA paths): not run")
            return None
        row = self.cell("trainer-reduce-overhead", mode="reduce-overhead", task="bert-fit", preset="tiny")
        if not self.ok(row):
            self.say("FAIL", name, self.why(row))
            return row
        detail = (f"bert-fit reduce-overhead: {row.get('ms_per_step'):.2f} ms/step, compiled_graphs="
                  f"{row.get('compiled_graphs')}, cudagraph_replays={row.get('cudagraph_replays')}, "
                  f"compile_took_effect={row.get('compile_took_effect')}, tf32_matmul={row.get('tf32_matmul')}")
        self.say("PASS" if row.get("compile_took_effect") is True else "FAIL", name, detail)
        return row

    def gpus_by_uuid(self, rows: list[dict]) -> None:
        """No CPU fallback, exactly the GPUs the cell asked for (one, or its --devices N, each its own), and the GPU
        the row names is NVML's GPU of that index."""
        name = "each row ran on its own GPUs (one, or --devices N), named by UUID"
        if not self.gpu:
            return self.say("SKIP", name, "no GPU")
        from fwbench.core.identity import CellIdentity
        from fwbench.harness.nvml import nvml_query

        def uuid_of(index: int) -> str | None:
            def query(pynvml):
                uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))
                return uuid.decode() if isinstance(uuid, bytes) else uuid
            return nvml_query(query)

        ok = [row for row in rows if self.ok(row)]
        problems = []
        for row in ok:
            where, devices = row.get("cell_id"), CellIdentity.of_row(row).setting("devices")
            extra = row.get("extra")
            # The runner lists a data-parallel cell's GPUs in extra.gpu_indices (gpu_index is only the first).
            indices = (json.loads(extra) if isinstance(extra, str) else extra or {}).get("gpu_indices")
            if row.get("device") != "cuda":
                problems.append(f"{where} ran on {row.get('device')}")
            elif row.get("device_count") != devices:
                problems.append(f"{where} saw {row.get('device_count')} GPUs, asked for {devices}")
            elif devices > 1 and (not indices or len(set(indices)) != devices or indices[0] != row.get("gpu_index")):
                problems.append(f"{where}: --devices {devices} but gpu_indices {indices} (gpu_index "
                                f"{row.get('gpu_index')})")
            elif row.get("gpu_index") is None or row.get("gpu_uuid") != uuid_of(row["gpu_index"]):
                problems.append(f"{where}: gpu_uuid {row.get('gpu_uuid')} is not NVML's for index "
                                f"{row.get('gpu_index')} ({uuid_of(row.get('gpu_index') or 0)})")
        detail = f"{len(ok) - len(problems)} of {len(ok)} ok rows" + (": " + "; ".join(problems[:5]) if problems else "")
        self.say("FAIL" if problems or not ok else "PASS", name, detail)

    def cuda_graphs(self, rows_of_the_kit: list[dict]) -> dict | None:
        """Its own bert-predict cell replays CUDA graphs, and every compiled (reduce-overhead) kit row says its
        compile took effect (compiled graphs, no skips, a CUDA-graph replay per timed step)."""
        name = "reduce-overhead replays CUDA graphs"
        if not self.gpu:
            # Not run: on a CPU the verdict can only be SKIP, and the compile alone (inductor's C++ build) would
            # cost a minute of the kit's CPU test. The kit's own runs compile reduce-overhead on the GPU host.
            self.say("SKIP", name, "no GPU (CUDA graphs need one): not run")
            return None
        row = self.cell("reduce-overhead", mode="reduce-overhead")
        problems = [] if self.ok(row) else [f"its own cell: {self.why(row)}"]
        compiled = [r for r in rows_of_the_kit if self.ok(r) and r.get("compile_mode") == "reduce-overhead"]
        for checked in ([row] if self.ok(row) else []) + compiled:
            if checked.get("compile_took_effect") is not True:
                problems.append(f"{checked.get('cell_id')} (compiled_graphs={checked.get('compiled_graphs')}, "
                                f"cudagraph_skips={checked.get('cudagraph_skips')}, "
                                f"cudagraph_replays={checked.get('cudagraph_replays')}, "
                                f"timed_steps={checked.get('timed_steps')}, "
                                f"compile_took_effect={checked.get('compile_took_effect')})")
        detail = (f"its own cell and {len(compiled)} compiled kit rows; "
                  + ("not in effect: " + "; ".join(problems) if problems else "all replayed CUDA graphs"))
        self.say("FAIL" if problems else "PASS", name, detail)
        return row

    def peak_memory(self, rows: list[dict]) -> None:
        ok = [row for row in rows if self.ok(row)]
        if not ok:
            return self.say("FAIL", "peak memory filled", "no ok rows to look at")
        empty = [row["cell_id"] for row in ok if not (row.get("peak_mem_bytes") or 0) > 0]
        kinds = sorted({str(row.get("peak_mem_kind")) for row in ok})
        detail = f"{len(ok) - len(empty)} of {len(ok)} ok rows filled (kinds: {', '.join(kinds)})"
        self.say("FAIL" if empty else "PASS", "peak memory filled",
                 detail + (f"; empty: {', '.join(empty[:5])}" if empty else ""))

    def busy(self) -> None:
        if not self.gpu:
            return self.say("SKIP", "competing GPU process marks rows busy", "no GPU")
        seconds = self.args.cell_timeout + 60
        competitor = subprocess.Popen([sys.executable, "-c", COMPETITOR, str(seconds)], stdout=subprocess.PIPE,
                                      text=True, env=run_kit.kit_environment(self.args.site))
        try:
            ready = competitor.stdout.readline().strip() == "ready"
            if not ready:
                return self.say("FAIL", "competing GPU process marks rows busy", "the competitor did not start")
            time.sleep(2)
            row = self.cell("busy")
        finally:
            competitor.terminate()
            competitor.wait(timeout=30)
        if not row:
            return self.say("FAIL", "competing GPU process marks rows busy", self.why(row))
        detail = (f"busy={row.get('busy')}, gpu_other_processes={row.get('gpu_other_processes')}, "
                  f"reasons: {row.get('busy_reasons')}")
        marked = row.get("busy") is True and (row.get("gpu_other_processes") or 0) >= 1
        self.say("PASS" if marked else "FAIL", "competing GPU process marks rows busy", detail)

    def energy(self, rows: list[dict]) -> None:
        """Every ok GPU row read the energy counter (energy_status ok, columns filled), but for windows too short
        for the counter's updates (window_too_short, columns empty by design)."""
        columns = ("energy_j", "joules_per_step", "mean_power_w")
        ok = [row for row in rows if self.ok(row)]
        statuses = {}
        for row in ok:
            statuses[row.get("energy_status")] = statuses.get(row.get("energy_status"), 0) + 1
        filled = [row for row in ok if all(row.get(column) is not None for column in columns)]
        detail = (f"{', '.join(columns)} filled on {len(filled)} of {len(ok)} ok rows; energy_status: "
                  + ", ".join(f"{status} {count}" for status, count in sorted(statuses.items(), key=str)))
        if not self.gpu:
            return self.say("SKIP", "energy columns", "no GPU (no NVML energy counter): " + detail)
        wrong = [row for row in ok if row.get("energy_status") != "window_too_short"
                 and not (row.get("energy_status") == "ok" and row in filled)]
        self.say("PASS" if ok and not wrong else "FAIL", "energy columns", detail)


def kit_rows(out: Path) -> list[dict]:
    from fwbench.core.results import read_row

    return [row for path in sorted((out / "rows").rglob("*.parquet")) if (row := read_row(path))]


def run_checks(args) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    run_kit.run_doctor(args)
    run_kit.install(args.wheels, args.site)
    checks = Checks(args)
    print(f"GPU checks on {'a GPU' if checks.gpu else 'no GPU (GPU-only checks SKIP)'}: native-torch "
          f"{args.task} at {args.preset}", flush=True)
    rows = [checks.sync()]
    checks.tf32()
    rows.append(checks.compiled_trainer())
    rows.append(checks.cuda_graphs(kit_rows(args.out)))
    checks.busy()
    rows = [row for row in rows if row] + kit_rows(args.out)
    checks.gpus_by_uuid(rows)
    checks.peak_memory(rows)
    checks.energy(rows)
    write_atomically(args.out / "checks.txt", "\n".join(checks.lines) + "\n")
    if args.export:
        run_kit.export(args)
    return 1 if checks.failed else 0
