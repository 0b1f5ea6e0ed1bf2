"""Where a unit's seconds went, from the kit starting `fwbench run` to the kit's export after it, as finely as the
row and the runner say:

  runner_start_s      `fwbench run` starting (its interpreter, imports, data check) until the cell process started:
                      the row's started_at less the cell's interpreter_start, less when the kit started the unit
  interpreter_s       the cell process's interpreter and the harness's imports (extra.phases_s.interpreter_start)
  data_load_s         reading the shared inputs (phases_s.data_load)
  import_ahead_s      a unit started ahead (fwbench.kit.ahead): importing its framework and workload before it
                      holds (phases_s.import_ahead)
  held_s              ... then waiting, held, for its turn (phases_s.held)
  framework_import_s  importing and configuring the framework (phases_s.framework_import)
  workload_import_s   importing the workload, and a model file with its inputs (phases_s.workload_import, model_file)
  neighbours_s        a released unit waiting, before its set-up, for the units started ahead to hold
                      (phases_s.neighbours)
  setup_s             building the model (the row's setup_s)
  first_step_s        the first step: trace and compile (the row's first_step_s)
  checksum_s          a fit's checksum of the weights it starts from (extra.initial_weights_s): all of a 7B
                      model's bytes read back to the host and hashed
  warmup_s            the warm-up steps, with the little else the steps' phase holds (the clock's reads):
                      phases_s.build_and_steps less setup, checksum, first step and timed steps
  timed_s             the timed steps: ms_per_step x timed_steps
  describe_s          describing the row after the window, the physics ceiling (phases_s.describe, ceiling)
  cell_end_s          the cell process writing its record and exiting, as the runner saw it (extra.process_s less
                      the cell's phases)
  runner_end_s        `fwbench run` writing the row and exiting (the unit's wall time less the above)
  export_s            the kit's state and export after the unit
  unaccounted_s       what the row could not split (a failed cell records fewer phases)

A window's timed fraction is its units' timed_s over its wall time. A unit started ahead also records ahead_s (in
kit-state.json, beside its parts): the seconds from its start to its turn (the unit before it ended), spent beside
that unit and off the window's clock.
"""

from __future__ import annotations

from datetime import datetime, timezone

from fwbench.core.results import extra_of

PARTS = {"runner_start_s": "start", "interpreter_s": "python", "data_load_s": "data",
         "import_ahead_s": "imports ahead", "held_s": "held",
         "framework_import_s": "imports", "workload_import_s": "workload", "neighbours_s": "neighbours",
         "setup_s": "setup",
         "checksum_s": "checksum", "first_step_s": "first step", "warmup_s": "warm-up", "timed_s": "timed",
         "describe_s": "describe", "cell_end_s": "cell end", "runner_end_s": "row", "export_s": "export",
         "unaccounted_s": "unaccounted"}


def number_or_none(value) -> float | None:
    """A row's value as a float; None where it is missing, not a number, a bool or NaN."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number  # NaN: a missing value read through pandas


def _started(row: dict) -> datetime | None:
    started = row.get("started_at")
    if isinstance(started, str):
        try:
            started = datetime.fromisoformat(started)
        except ValueError:
            return None
    if hasattr(started, "to_pydatetime"):  # a pandas Timestamp
        started = started.to_pydatetime()
    if not isinstance(started, datetime):
        return None
    return started if started.tzinfo else started.replace(tzinfo=timezone.utc)


def _sum(*values: float | None) -> float | None:
    return None if any(value is None for value in values) else sum(values)


def of_unit(row: dict | None, *, began_at: datetime | None, wall_s: float, export_s: float | None = None) -> dict:
    """The unit's seconds by part (PARTS; a part the row does not give is left out), rounded to 10 ms. began_at:
    when the kit started `fwbench run` (UTC; None: not recorded, as by a kit before this one); wall_s: until it
    exited."""
    row = row or {}
    extra = extra_of(row.get("extra"))
    extra = extra if isinstance(extra, dict) else {}
    phases = {name: number_or_none(value) for name, value in (extra.get("phases_s") or {}).items()}
    process_s = number_or_none(extra.get("process_s"))
    interpreter_s = phases.get("interpreter_start")
    started = _started(row)
    runner_start_s = (None if started is None or interpreter_s is None or began_at is None
                      else (started - began_at).total_seconds() - interpreter_s)
    setup_s, first_step_s = number_or_none(row.get("setup_s")), number_or_none(row.get("first_step_s"))
    checksum_s = number_or_none(extra.get("initial_weights_s"))
    ms, steps = number_or_none(row.get("ms_per_step")), number_or_none(row.get("timed_steps"))
    timed_s = ms * steps / 1000 if ms is not None and steps is not None else None
    in_cell = [value for name, value in phases.items() if name != "interpreter_start" and value is not None]
    parts = {
        "runner_start_s": runner_start_s,
        "interpreter_s": interpreter_s,
        "data_load_s": phases.get("data_load"),
        "import_ahead_s": phases.get("import_ahead"),
        "held_s": phases.get("held"),
        "framework_import_s": phases.get("framework_import"),
        "workload_import_s": _sum(phases.get("workload_import"), phases.get("model_file") or 0.0),
        "neighbours_s": phases.get("neighbours"),
        "setup_s": setup_s,
        "checksum_s": checksum_s,
        "first_step_s": first_step_s,
        "warmup_s": (None if None in (phases.get("build_and_steps"), setup_s, first_step_s, timed_s)
                     else phases["build_and_steps"] - setup_s - (checksum_s or 0.0) - first_step_s - timed_s),
        "timed_s": timed_s,
        "describe_s": _sum(phases.get("describe"), phases.get("ceiling") or 0.0),
        "cell_end_s": (None if process_s is None or interpreter_s is None or not in_cell
                       else process_s - interpreter_s - sum(in_cell)),
        "runner_end_s": (None if runner_start_s is None or process_s is None
                         else wall_s - runner_start_s - process_s),
        "export_s": export_s,
    }
    known = {name: value for name, value in parts.items() if value is not None}
    # The parts are disjoint (warmup_s is what the steps' phase holds beyond the others); the rest is unaccounted.
    known["unaccounted_s"] = wall_s + (export_s or 0.0) - sum(known.values())
    return {name: round(value, 2) for name, value in known.items()}


def with_checksum(parts: dict | None, row: dict | None) -> dict | None:
    """Parts a kit before `checksum_s` recorded (the checksum inside warm-up), with it taken out of warm-up where the
    unit's row has it."""
    checksum_s = number_or_none((extra_of((row or {}).get("extra")) or {}).get("initial_weights_s"))
    if not parts or "checksum_s" in parts or checksum_s is None or parts.get("warmup_s") is None:
        return parts
    return {**parts, "checksum_s": round(checksum_s, 2), "warmup_s": round(parts["warmup_s"] - checksum_s, 2)}


def describe(breakdown: dict | None) -> str:
    """'start 3.1 | python 1.2 | ... | export 0.2' (the parts the row gave)."""
    if not breakdown:
        return "no breakdown recorded"
    # + 0.0: a part that rounds to zero from below reads 0.0, not -0.0.
    return " | ".join(f"{PARTS[name]} {round(breakdown[name], 1) + 0.0:.1f}" for name in PARTS
                      if breakdown.get(name) is not None)


def timed_fraction(timed_s: float, window_wall_s: float) -> str:
    return "—" if window_wall_s <= 0 else f"{100 * timed_s / window_wall_s:.1f}%"


def overhead_s(entry: dict) -> float | None:
    """A unit's seconds on the window's clock besides its first step and timed steps (kit-state.json's entry: its
    wall time less what ran ahead, and its export), what the kit's target of at most 10 s per unit counts; None
    without parts."""
    parts = entry.get("breakdown")
    wall_s = number_or_none(entry.get("wall_s"))
    if not parts or wall_s is None:
        return None
    return (wall_s - (number_or_none(entry.get("ahead_s")) or 0.0) + (parts.get("export_s") or 0.0)
            - (parts.get("first_step_s") or 0.0) - (parts.get("timed_s") or 0.0))
