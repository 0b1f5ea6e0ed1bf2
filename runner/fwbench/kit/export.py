"""The files a window brings back, and how a later window (or this machine, to publish) takes them up again."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

from fwbench.core.atomic import write_atomically
from fwbench.kit.folders import find_results, gpu_slug
from fwbench.kit.layout import EXPORTED, RESULTS, ROW_FOLDERS, KitError, KitFolders
from fwbench.kit.log import log


def exported_source(folders: KitFolders, name: str) -> Path:
    return folders.out / ("report/report.md" if name == "report.md" else name)


def export(folders: KitFolders, export_dir: Path | None) -> None:
    """The files worth bringing back, at most 8 (layout.EXPORTED): the rows and check rows packed into one archive,
    the report (markdown), the host, the kit's state and log, the checks and the doctor's lines. Each written
    atomically, so that a window killed mid-export still leaves whole files."""
    if export_dir is None:
        return
    export_dir.mkdir(parents=True, exist_ok=True)
    archive = export_dir / ".rows.tar.gz.tmp"
    with tarfile.open(archive, "w:gz") as tar:
        for folder in ROW_FOLDERS:
            if (folders.out / folder).is_dir():
                tar.add(folders.out / folder, arcname=folder,
                        filter=lambda info: None if "/.work" in info.name else info)
    archive.replace(export_dir / "rows.tar.gz")
    for name in EXPORTED[1:]:
        source = exported_source(folders, name)
        if source.is_file():
            write_atomically(export_dir / name, source.read_bytes())


def restore_into(folders: KitFolders, source: str | Path, results: Path = RESULTS) -> None:
    """Bring an earlier window's files into the window's folder: `auto` (the newest published results folder of
    this GPU model, if any), an exported folder or its rows.tar.gz, or a published results folder."""
    if str(source) == "auto":
        from fwbench.kit.host import gpu_names

        found = find_results(results, gpu_slug(gpu_names()))
        if found is None:
            log(f"restore auto: no published results of this GPU under {results}: starting afresh")
            return
        source = found
    source = Path(source)
    if folders.state.is_file():
        raise KitError(f"{folders.out} already holds a kit state: restore into an empty --out")
    folders.out.mkdir(parents=True, exist_ok=True)
    if source.is_file():
        restore_archive(source, folders.out)
        folder = source.parent
    elif (source / "rows.tar.gz").is_file():
        restore_archive(source / "rows.tar.gz", folders.out)
        folder = source
    elif (source / "rows").is_dir():  # a published folder: rows/ and checks/ as folders
        for name in ROW_FOLDERS:
            if (source / name).is_dir():
                shutil.copytree(source / name, folders.out / name, dirs_exist_ok=True)
        folder = source
    else:
        raise KitError(f"{source}: neither a rows.tar.gz, an exported folder nor a published results folder")
    for name in EXPORTED[2:]:
        if (folder / name).is_file():
            write_atomically(folders.out / name, (folder / name).read_bytes())
    for earlier in folder.glob("host-*.json"):
        write_atomically(folders.out / earlier.name, earlier.read_bytes())
    log(f"restored {source} into {folders.out}")


def restore_archive(archive: Path, out: Path) -> None:
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.split("/")[0] in ROW_FOLDERS]
        if any(m.issym() or m.islnk() or ".." in Path(m.name).parts for m in members):
            raise KitError(f"{archive}: unexpected links or paths in the archive")
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.12 (and backports)
        tar.extractall(out, members=members, **safe)
