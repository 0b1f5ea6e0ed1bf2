"""kit-state.json: what each unit came to, the GPU checks' verdicts and the windows that ran, so that a window starts
where the last one stopped, on this machine or another of the same model (restore, publish).

A unit that ran and failed is not tried again at the same commit (its row says why) unless asked (--retry-failed);
it is at another commit (a failure seen on a GPU is a bug to fix, and the next window re-checks the fix); one cut
short by a window's budget (status budget-cut, no row kept) always runs again. A cell's repeat r waits for an ok
repeat r-1 (repeating a failing cell would only repeat the failure).
"""

from __future__ import annotations

import json
from pathlib import Path

from fwbench.kit.estimates import estimate_s
from fwbench.kit.layout import KitError
from fwbench.kit.unit import Unit, cell_key_of, upgrade_key

BUDGET_CUT = "budget-cut"
# A repeat of a cell that already ran ok is expected to take about as long again: it starts only if this many
# times its wall time (at least MIN_REPEAT_S) is left.
REPEAT_FACTOR, MIN_REPEAT_S = 1.5, 30.0


class KitState:
    def __init__(self, path: Path, commit: str | None = None, preset: str | None = None):
        """commit: the commit this window runs (a failure at another commit runs again). preset: the plan's; a state
        holds one preset's units (KitError for another), and keys of an older kit state are read at it."""
        self.path, self.commit = path, commit
        saved = json.loads(path.read_text()) if path.is_file() else {}
        # A kit state written before units were cell specs names no preset: its windows were all at paper.
        older = any("/" in key for key in saved.get("units", {}))
        self.preset = saved.get("preset") or ("paper" if older else None)
        if preset is not None and self.preset not in (None, preset):
            raise KitError(f"{path} holds units at --preset {self.preset}: pass --preset {self.preset} (or another "
                           "--out for another preset)")
        self.preset = self.preset or preset
        self.units: dict[str, dict] = {upgrade_key(key, self.preset or "paper"): entry
                                       for key, entry in saved.get("units", {}).items()}
        # GPU check -> its last verdict, detail and when, and the GPU model and checked code it ran on (a later
        # window re-runs what has not passed on its GPU model with its code: fwbench.kit.checks.code_fingerprint).
        self.checks: dict[str, dict] = saved.get("checks", {})
        # The last preflight that passed: what it ran on (GPU model, commit, wheelhouse, doctor's plan) and what it
        # found (stacks that do not import); a window with the same key does not run doctor and the imports again.
        self.preflight: dict | None = saved.get("preflight")
        # Each window: when it began, its wall time so far, the GPU it ran on.
        self.windows: list[dict] = saved.get("windows", [])

    def status(self, unit: Unit) -> str | None:
        return (self.units.get(unit.key) or {}).get("status")

    def record(self, unit: Unit, status: str, wall_s: float, ms_per_step: float | None, *,
               began_at: str | None = None, breakdown: dict | None = None, ahead_s: float = 0.0) -> None:
        """began_at: when the unit started (UTC, ISO); breakdown: where its seconds went (fwbench.kit.breakdown);
        ahead_s: the seconds of wall_s before its turn, beside the unit before it (fwbench.kit.ahead)."""
        order = 1 + max((entry.get("order") or 0 for entry in self.units.values()), default=0)  # the run's order
        self.units[unit.key] = {"status": status, "wall_s": round(wall_s, 1), "ms_per_step": ms_per_step,
                                "commit": self.commit, "window": len(self.windows) or None, "order": order,
                                **({"began_at": began_at} if began_at else {}),
                                **({"ahead_s": round(ahead_s, 1)} if ahead_s else {}),
                                **({"breakdown": breakdown} if breakdown else {})}

    def known_wall_s(self, unit: Unit) -> float | None:
        """The longest wall time an ok repeat of this cell took (a later repeat should take about as long)."""
        walls = [entry["wall_s"] for key, entry in self.units.items()
                 if cell_key_of(key) == unit.cell_key and entry.get("status") == "ok"]
        return max(walls) if walls else None

    def needed_s(self, unit: Unit) -> float:
        """How much of the budget a unit should have before it starts: a cell run before, about its wall time; a
        first run, the plan's estimate (estimates.estimate_s)."""
        known = self.known_wall_s(unit)
        return estimate_s(unit) if known is None else max(MIN_REPEAT_S, REPEAT_FACTOR * known)

    def to_run(self, unit: Unit, retry_failed: bool) -> bool:
        """Whether the unit itself is still to run (not done, not failed at this commit), whatever its previous
        repeat."""
        status = self.status(unit)
        if status == BUDGET_CUT:  # the window ran out, not the cell: it runs again with its full timeout
            return True
        failed_at = (self.units.get(unit.key) or {}).get("commit")
        return not (status == "ok" or (status is not None and not retry_failed and failed_at == self.commit))

    def runnable(self, unit: Unit, retry_failed: bool) -> bool:
        if not self.to_run(unit, retry_failed):
            return False
        if unit.repeat == 0 or self.status(unit) == BUDGET_CUT:
            return True
        # The same cell's previous repeat: every field but the repeat (its devices and steps included).
        return self.status(unit.other_repeat(unit.repeat - 1)) == "ok"

    def pending(self, units: list[Unit], retry_failed: bool) -> list[Unit]:
        """The units still to run in the plan's order, those a window's budget cut first (they were next when the
        last one ended): those runnable now, and the repeats whose earlier repeats are ok or still to run (each
        runs in this window once its previous repeat is ok by its turn)."""
        def chain_open(unit: Unit) -> bool:
            earlier = [unit.other_repeat(repeat) for repeat in range(unit.repeat)]
            return all(self.status(before) == "ok" or self.to_run(before, retry_failed) for before in earlier)

        found = [unit for unit in units if self.runnable(unit, retry_failed)
                 or (self.to_run(unit, retry_failed) and chain_open(unit))]
        return sorted(found, key=lambda unit: self.status(unit) != BUDGET_CUT)

    def counts_line(self, units: list[Unit], retry_failed: bool) -> str:
        """'N units: a done, b failed, c runnable now, d waiting for an earlier repeat'."""
        done = sum(self.status(unit) == "ok" for unit in units)
        runnable = sum(self.runnable(unit, retry_failed) for unit in units)
        failed = sum(self.status(unit) not in (None, "ok", BUDGET_CUT) for unit in units)
        return (f"{len(units)} units: {done} done, {failed} failed, {runnable} runnable now, "
                f"{len(units) - done - failed - runnable} waiting for an earlier repeat")

    def record_check(self, name: str, verdict: str, detail: str, when: str, *, gpu: str | None = None,
                     code: str | None = None) -> None:
        self.checks[name] = {"verdict": verdict, "detail": detail, "at": when, "gpu": gpu, "code": code}

    def passed(self, name: str, *, gpu: str | None, code: str | None) -> bool:
        """Whether the check passed on this GPU model with this checked code (a check recorded before either was
        kept has not: it runs again once)."""
        entry = self.checks.get(name) or {}
        return (entry.get("verdict") == "PASS" and "code" in entry and entry.get("gpu") == gpu
                and entry.get("code") == code)

    def passed_preflight(self, key: dict) -> dict | None:
        """The earlier preflight with this key that passed (None: none)."""
        return self.preflight if self.preflight and self.preflight.get("key") == key else None

    def record_preflight(self, key: dict, unrunnable: dict[str, str], when: str) -> None:
        self.preflight = {"key": key, "unrunnable": unrunnable, "at": when}

    def begin_window(self, began_at: str, gpu: str | None) -> None:
        self.windows.append({"began_at": began_at, "wall_s": 0.0, "gpu": gpu})

    def window_wall(self, wall_s: float) -> None:
        """The current window's wall time so far (kept up to date, so that a window killed at its limit says it)."""
        if self.windows:
            self.windows[-1]["wall_s"] = round(wall_s, 1)

    def to_json(self) -> str:
        saved = {"units": self.units, "checks": self.checks, "windows": self.windows,
                 **({"preflight": self.preflight} if self.preflight else {})}
        return json.dumps({**({"preset": self.preset} if self.preset else {}), **saved}, indent=2,
                          sort_keys=True) + "\n"
