"""`fwbench kit publish`: the kit's results copied into benchmarks/results/<date>-<gpu>/ for committing (rows, check
rows, report, host facts, checks, doctor, state and log), where the next window of the same GPU model restores them
from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fwbench.kit.export import exported_source
from fwbench.kit.folders import continued_folder, gpu_slug, keep_earlier_host
from fwbench.kit.layout import EXPORTED, RESULTS, ROW_FOLDERS, KitError, KitFolders
from fwbench.kit.log import log
from fwbench.kit.report import aggregate


def publish(folders: KitFolders, dest: Path = RESULTS) -> Path:
    """The folder is named after the first window's date and the GPU; a later window's files replace those of the
    same name there (earlier host facts stay as host-<time>.json). A window that went on from a published folder
    joins it (its export brings back this window's host facts only, so the first window's date is that folder's)."""
    host_path = folders.out / "host.json"
    if not host_path.is_file():
        raise KitError(f"{host_path} is missing: nothing was run into {folders.out} (or restore it first)")
    host = json.loads(host_path.read_text())
    slug = gpu_slug((host.get("nvml") or {}).get("gpu_names") or [])
    if not slug:
        raise KitError("host.json names no GPU: these rows are not GPU results")
    earlier = sorted(folders.out.glob("host-*.json"))
    first = host["recorded_at"] if not earlier else json.loads(earlier[0].read_text()).get("recorded_at",
                                                                                           host["recorded_at"])
    target = continued_folder(dest, slug, folders.state) or dest / f"{first[:10]}-{slug}"
    keep_earlier_host(target / "host.json", host)
    try:
        aggregate(folders)  # the report from every row there is (a restored folder has none yet)
    except KitError as exc:
        log(f"publishing without a fresh report: {exc}")
    target.mkdir(parents=True, exist_ok=True)
    for name in ROW_FOLDERS:
        if (folders.out / name).is_dir():
            if (target / name).exists():
                shutil.rmtree(target / name)
            shutil.copytree(folders.out / name, target / name, ignore=shutil.ignore_patterns(".work", "logs"))
    for name in [*EXPORTED[1:], *(path.name for path in earlier)]:
        source = exported_source(folders, name)
        if source.is_file():
            shutil.copy2(source, target / name)
    log(f"published {sum(1 for _ in (target / 'rows').rglob('*.parquet'))} rows and the report to {target}")
    return target
