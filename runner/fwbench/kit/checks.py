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
  GPU busy           this window's rows sampled NVML's GPU utilization over their timed window (extra.gpu_busy)

A check that needs a GPU says SKIP on a machine without one, and so does a check the window's time cannot fit (it
runs in the next window). In a window (`fwbench kit window`) the checks that run cells come first, at `tiny` sizes,
cheapest first, within their share of the window; the checks over rows come last, over every row the window
left. Each line goes to stdout, to checks.txt and to kit-state.json as soon as its check ends; a later window
re-runs only the cell checks that have not passed.

What one GPU without Docker cannot prove, and so no check here claims (on a host with several GPUs the check above
does see each cell's share, for the kit's own placement): that a cell sees one GPU when the host has several
(slots, docker device requests by id, compose `count: 1`, Slurm's --gres; tested with the GPUs mocked), that a
container or a scheduler's CUDA_VISIBLE_DEVICES of UUIDs or MIG ids finds the right NVML handle (mocked in
tests/test_gpu_identity.py), that TensorFlow holds no GPU memory in Keras JAX/PyTorch cells (the kit's host has no
TensorFlow), and doctor's Docker checks (NVIDIA Container Toolkit, a GPU inside a container).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from fwbench.core.atomic import write_atomically
from fwbench.core.precision import TF32_AS_PRECISION
from fwbench.core.results import extra_of
from fwbench.kit import cells
from fwbench.kit.host import window_gpu
from fwbench.kit.install import kit_environment
from fwbench.kit.layout import REPO, KitFolders
from fwbench.kit.rows import all_rows
from fwbench.kit.unit import PUBLISHED, Unit

# Synced and unsynced ms/step closer than this are taken as equal (a sync that does nothing).
SYNC_MIN_DIFFERENCE = 0.01
SYNC_STEPS = 200
COMPETITOR = ("import sys, time, torch\n"
              "x = torch.randn(4096, 4096, device='cuda')\n"
              "print('ready', flush=True)\n"
              "end = time.time() + float(sys.argv[1])\n"
              "while time.time() < end:\n"
              "    (x @ x).sum().item()\n")


# The code whose behaviour the cell checks test: the harness (clock, sync, TF32, contention, CUDA graphs), the torch
# workloads they run, the precision rules and the checks themselves. A check that passed on a GPU model runs again
# there only when this code changed (code_fingerprint), or when asked (--recheck).
CHECKED_CODE = ("runner/fwbench/harness", "runner/fwbench/workloads/torch", "runner/fwbench/workloads/__init__.py",
                "runner/fwbench/core/precision.py", "runner/fwbench/kit/checks.py")


def code_fingerprint(repo: Path = REPO) -> str:
    """A digest of CHECKED_CODE's Python files (paths and contents)."""
    digest = hashlib.sha256()
    for part in CHECKED_CODE:
        root = repo / part
        for path in sorted([root] if root.is_file() else root.rglob("*.py")):
            digest.update(path.relative_to(repo).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


# Estimated seconds of a check's cell on a GPU host, from starting `fwbench run` to its row (tiny sizes: the process
# start, imports and CUDA set-up dominate, about 18 s on the H200; a reduce-overhead cell adds its compile).
PLAIN_CELL_S, COMPILED_CELL_S = 20.0, 75.0
# A check's cell starts only with a timeout of at least this left after the unit's own overhead (Checks.cell).
MIN_CELL_TIMEOUT_S = 10.0


def needed_s(*cells_s: float) -> float:
    """The share a check needs before it starts: its cells' estimates, the last at least what Checks.cell asks to
    start it, so that a check is never begun only to have its last cell refused (on the H200, a 45-s share ran the
    sync check's first cell and then had too little left for its second)."""
    *before, last = cells_s
    return sum(before) + max(last, cells.UNIT_OVERHEAD_S + MIN_CELL_TIMEOUT_S)


# Each check's cells, by their estimates (TF32's first is the per-step sync check's synced cell where that ran).
CELL_CHECKS = (("per-step sync", "sync", (PLAIN_CELL_S, PLAIN_CELL_S)),
               ("TF32 recorded as set", "tf32", (PLAIN_CELL_S, PLAIN_CELL_S, PLAIN_CELL_S)),
               ("competing GPU process marks rows busy", "busy", (PLAIN_CELL_S,)),
               ("reduce-overhead replays CUDA graphs", "cuda_graph_cell", (COMPILED_CELL_S,)),
               ("compiled Trainer fit runs", "compiled_trainer", (COMPILED_CELL_S,)))


def on_gpu() -> bool:
    from fwbench.harness.envinfo import nvml_info

    return bool(nvml_info().get("gpu_names"))


class OutOfTime(Exception):
    """A check's cell was cut by the window's time, not by anything it measured."""


def started_since(row: dict, since: datetime) -> bool:
    """Whether the row's cell started at or after `since` (a row without a start time counts as this window's:
    checked rather than passed over)."""
    started = row.get("started_at")
    if started is None or (isinstance(started, float) and started != started):
        return True
    if isinstance(started, str):
        started = datetime.fromisoformat(started)
    if hasattr(started, "to_pydatetime"):  # a pandas Timestamp
        started = started.to_pydatetime()
    if started.tzinfo is None:
        started = started.replace(tzinfo=timezone.utc)
    return started >= since


class Checks:
    def __init__(self, folders: KitFolders, *, preset: str, task: str, cell_timeout_s: float, state=None,
                 time_left=None, on_line=None):
        """preset, task: the cell the sync, TF32 and busy checks time (at `tiny` but for the busy one); state: the
        kit's KitState (verdicts are recorded there); time_left: seconds this phase may still use (None:
        unbounded); on_line: called after each verdict (the window exports then)."""
        self.folders, self.preset, self.task, self.cell_timeout_s = folders, preset, task, cell_timeout_s
        self.lines, self.failed = [], False
        self.gpu = on_gpu()
        self.state, self.time_left, self.on_line = state, time_left, on_line
        self.gpu_model = window_gpu(folders)  # what a passed check is recorded against, with the checked code
        self.code = code_fingerprint()
        self.rows: list[dict] = []  # the rows of this window's check cells
        self.cuda_graph_row: dict | None = None
        self.sync_row: dict | None = None

    def say(self, verdict: str, name: str, detail: str) -> None:
        self.failed |= verdict == "FAIL"
        line = f"{verdict:<4} {name}: {detail}"
        self.lines.append(line)
        print(line, flush=True)
        if self.state is not None:
            self.state.record_check(name, verdict, detail, datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                    gpu=self.gpu_model, code=self.code)
        write_atomically(self.folders.out / "checks.txt", "\n".join(self.lines) + "\n")
        if self.on_line is not None:
            self.on_line()

    def cell(self, name: str, mode: str = "none", extra: list[str] | None = None, *,
             preset: str | None = None, task: str | None = None, precision: str = PUBLISHED,
             steps: int | None = None, per_step_sync: bool = True) -> dict | None:
        """precision: what the cell's options amount to (--tf32 on is tf32), so that its row is found."""
        rows = self.folders.checks / name
        if rows.exists():
            shutil.rmtree(rows)  # a check measures now, never an earlier row
        unit = Unit.of("native-torch", mode, task or self.task, 0, preset=preset or self.preset, precision=precision,
                       steps=steps, per_step_sync=per_step_sync)
        timeout = self.cell_timeout_s
        if self.time_left is not None:
            timeout = min(timeout, self.time_left() - cells.UNIT_OVERHEAD_S)
            if timeout < MIN_CELL_TIMEOUT_S:
                raise OutOfTime(f"{name}: no time left in this window")
        row = cells.run_unit(unit, self.folders, timeout, extra, rows=rows)
        if row and row.get("status") == "timeout" and timeout < self.cell_timeout_s:
            raise OutOfTime(f"{name}: cut at {timeout:.0f} s by the window's time")
        if row:
            self.rows.append(row)
        return row

    def run_cell_checks(self, names: set[str] | None = None) -> None:
        """The checks that run cells, cheapest first, each only if its estimate fits what is left; one that has
        passed in an earlier window (kit-state.json) on this GPU model, with the code it checks as it is now
        (code_fingerprint), is not run again but for `names` asked for."""
        for name, method, cells_s in CELL_CHECKS:
            if method == "tf32" and self.ok(self.sync_row):
                cells_s = cells_s[1:]
            estimate_s = needed_s(*cells_s)
            if names is None and self.state is not None and self.state.passed(name, gpu=self.gpu_model,
                                                                              code=self.code):
                earlier = self.state.checks[name]
                self.lines.append(f"PASS {name}: in an earlier window ({earlier.get('at')}, same GPU model and "
                                  f"checked code): {earlier.get('detail')}")
                continue
            if names is not None and name not in names:
                continue
            if self.gpu and self.time_left is not None and self.time_left() < estimate_s:
                self.say("SKIP", name, f"not run: about {estimate_s:.0f} s needed, {max(self.time_left(), 0):.0f} s "
                                       "left of the checks' share of this window (it runs in the next window)")
                continue
            try:
                getattr(self, method)()
            except OutOfTime as exc:
                self.say("SKIP", name, f"{exc} (it runs in the next window)")
            except Exception as exc:  # noqa: BLE001 - a broken check is a FAIL line, never a lost window
                self.say("FAIL", name, f"the check itself raised {type(exc).__name__}: {str(exc)[:300]}")

    def run_row_checks(self, kit_rows: list[dict], since: datetime | None = None) -> None:
        """The checks over rows: this window's check cells and every row of the kit's cells (the GPU identity only
        of the rows that started at or after `since`, this window's start: see gpus_by_uuid)."""
        rows = self.rows + kit_rows
        for name, check in (("compiled kit rows replay CUDA graphs", lambda: self.cuda_graphs(kit_rows)),
                            ("each row ran on its own GPUs", lambda: self.gpus_by_uuid(rows, since)),
                            ("peak memory filled", lambda: self.peak_memory(rows)),
                            ("energy columns", lambda: self.energy(rows)),
                            ("GPU busy sampled", lambda: self.gpu_busy(rows, since)),
                            ("units started ahead held apart", lambda: self.held_apart(kit_rows))):
            try:
                check()
            except Exception as exc:  # noqa: BLE001
                self.say("FAIL", name, f"the check itself raised {type(exc).__name__}: {str(exc)[:300]}")

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
        synced = self.sync_row = self.cell("sync-on", preset="tiny", steps=SYNC_STEPS)
        unsynced = self.cell("sync-off", preset="tiny", steps=SYNC_STEPS, per_step_sync=False)
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
            if setting == "default" and self.ok(self.sync_row):
                row = self.sync_row  # the per-step sync check's synced cell ran at --tf32 default: one cell less
            else:
                row = self.cell(f"tf32-{setting}", extra=["--tf32", setting], preset="tiny",
                                precision=TF32_AS_PRECISION[setting])
            if setting == "on" and not self.gpu:
                # fwbench's one precision rule: a precision the device cannot run is an unsupported row, not an ok
                # row labelled tf32 that ran fp32 (a CPU has no TF32).
                if row and row.get("status") == "unsupported":
                    details.append("on: unsupported on a CPU, as it must be")
                else:
                    wrong.append(f"--tf32 on on a CPU: {self.why(row)} (expected an unsupported row)")
                continue
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

    def gpus_by_uuid(self, rows: list[dict], since: datetime | None = None) -> None:
        """No CPU fallback, exactly the GPUs the cell asked for (one, or its --devices N, each its own), and the GPU
        the row names is NVML's GPU of that index. Only rows that started at or after `since` (this window's): an
        earlier window's rows ran on another machine, whose GPUs this host's NVML does not know; that window
        checked them."""
        name = "each row ran on its own GPUs (one, or --devices N), named by UUID"
        if not self.gpu:
            return self.say("SKIP", name, "no GPU")
        earlier = [row for row in rows if since is not None and not started_since(row, since)]
        rows = [row for row in rows if since is None or started_since(row, since)]
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
        detail = (f"{len(ok) - len(problems)} of {len(ok)} ok rows of this window"
                  + (f" ({len(earlier)} rows of earlier windows were checked by theirs)" if earlier else "")
                  + (": " + "; ".join(problems[:5]) if problems else ""))
        self.say("FAIL" if problems or not ok else "PASS", name, detail)

    @staticmethod
    def graphs_in_effect(row: dict) -> str | None:
        """None where a compiled row replayed CUDA graphs as it should, else what it says instead."""
        if row.get("compile_took_effect") is True:
            return None
        return (f"{row.get('cell_id')} (compiled_graphs={row.get('compiled_graphs')}, "
                f"cudagraph_skips={row.get('cudagraph_skips')}, cudagraph_replays={row.get('cudagraph_replays')}, "
                f"timed_steps={row.get('timed_steps')}, compile_took_effect={row.get('compile_took_effect')})")

    def cuda_graph_cell(self) -> dict | None:
        """Its own bert-predict cell at tiny, compiled reduce-overhead, replays CUDA graphs (compiled graphs, no
        skips, a CUDA-graph replay per timed step)."""
        name = "reduce-overhead replays CUDA graphs"
        if not self.gpu:
            # Not run: on a CPU the verdict can only be SKIP, and the compile alone (inductor's C++ build) would
            # cost a minute of the kit's CPU test.
            self.say("SKIP", name, "no GPU (CUDA graphs need one): not run")
            return None
        row = self.cuda_graph_row = self.cell("reduce-overhead", mode="reduce-overhead", preset="tiny")
        if not self.ok(row):
            self.say("FAIL", name, f"its own cell: {self.why(row)}")
        else:
            problem = self.graphs_in_effect(row)
            self.say("FAIL" if problem else "PASS", name, f"not in effect: {problem}" if problem else
                     f"{row.get('cudagraph_replays')} replays over {row.get('timed_steps')} timed steps, "
                     f"{row.get('compiled_graphs')} compiled graphs, no skips")
        return row

    def cuda_graphs(self, rows_of_the_kit: list[dict]) -> None:
        """Every compiled (reduce-overhead) ok kit row says its compile took effect."""
        name = "compiled kit rows replay CUDA graphs"
        if not self.gpu:
            return self.say("SKIP", name, "no GPU (CUDA graphs need one)")
        compiled = [r for r in rows_of_the_kit if self.ok(r) and r.get("compile_mode") == "reduce-overhead"]
        if not compiled:
            return self.say("SKIP", name, "no ok reduce-overhead kit row yet")
        problems = [problem for row in compiled if (problem := self.graphs_in_effect(row))]
        detail = (f"{len(compiled)} compiled kit rows; "
                  + ("not in effect: " + "; ".join(problems) if problems else "all replayed CUDA graphs"))
        self.say("FAIL" if problems else "PASS", name, detail)

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
        seconds = self.cell_timeout_s + 60
        competitor = subprocess.Popen([sys.executable, "-c", COMPETITOR, str(seconds)], stdout=subprocess.PIPE,
                                      text=True, env=kit_environment(self.folders))
        try:
            ready = competitor.stdout.readline().strip() == "ready"
            if not ready:
                return self.say("FAIL", "competing GPU process marks rows busy", "the competitor did not start")
            time.sleep(2)
            row = self.cell("busy", preset="tiny")
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

    def gpu_busy(self, rows: list[dict], since: datetime | None = None) -> None:
        """Every ok GPU row this window ran (an earlier window's may predate the sampling) read NVML's utilization
        samples over its timed window (extra.gpu_busy ok), but for windows too short to hold samples and MIG
        slices (whose samples would be the whole GPU's)."""
        name = "GPU busy sampled"
        ok = [row for row in rows if self.ok(row) and (since is None or started_since(row, since))]
        statuses: dict[str, int] = {}
        for row in ok:
            status = ((extra_of(row.get("extra")) or {}).get("gpu_busy") or {}).get("status", "missing")
            statuses[status] = statuses.get(status, 0) + 1
        detail = (f"extra.gpu_busy of {len(ok)} ok rows this window: "
                  + (", ".join(f"{status} {count}" for status, count in sorted(statuses.items())) or "none"))
        if not self.gpu:
            return self.say("SKIP", name, "no GPU (no NVML samples): " + detail)
        wrong = sum(count for status, count in statuses.items() if status not in ("ok", "window_too_short", "mig"))
        self.say("PASS" if ok and not wrong else "FAIL", name, detail)

    def held_apart(self, rows: list[dict]) -> None:
        """The units run through kit.ahead (held after their imports, ahead of their turn or at it): every one held
        touching no device, and every released unit's set-up began with its neighbours held. SKIP where no row
        held (--prefetch 0)."""
        name = "units started ahead held apart"
        extras = [(row["cell_id"], extra_of(row.get("extra")) or {}) for row in rows if self.ok(row)]
        held = [(cell, extra) for cell, extra in extras if extra.get("held")]
        waited = [(cell, extra) for cell, extra in extras if extra.get("neighbours")]
        if not held and not waited:
            return self.say("SKIP", name, "no row held after its imports (--prefetch 0)")
        problems = [f"{cell}: its imports started {', '.join(extra['held']['device_started_ahead'])}"
                    for cell, extra in held if extra["held"].get("device_started_ahead")]
        problems += [f"{cell}: set-up began beside {', '.join(extra['neighbours']['not_held'])}, not held"
                     for cell, extra in waited if extra["neighbours"].get("not_held")]
        met = sum(extra.get("held_neighbours") or 0 for _cell, extra in extras)
        detail = (f"{len(held)} rows held after their imports, {len(waited)} waited for neighbours, {met} held "
                  "neighbours met in timed windows (not competition)")
        self.say("FAIL" if problems else "PASS", name, detail + ("; " + "; ".join(problems[:5]) if problems else ""))


def kit_rows(folders: KitFolders) -> list[dict]:
    """Every row of the kit's cells (not the check cells')."""
    return all_rows(folders.rows)

