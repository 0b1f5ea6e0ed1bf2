"""The offline GPU kit (`fwbench kit`, docs/gpu-kit.md): fwbench's cells on a CUDA host with no network that receives
a copy of this repository and a small folder, runs one command of at most 10 minutes (a window), hands back at most
8 files and keeps nothing between windows.

Modules, bottom up: layout (folders, files, KitError), log, image (what the host's image has), unit (one repeat of one
cell: a cell spec), estimates (published step times, a window's timed steps, a unit's expected seconds), plan (the
units in run order), state (kit-state.json), rows (a unit's rows, by cell identity), breakdown (where a unit's
seconds went), wheelhouse, source (the commit), install, host, cells (one unit through `fwbench run`), checks (the GPU
checks), preflight, report, folders (published results folders), export (and restore), window, status, publish,
prepare; figures and page (a results page from a published folder).
"""
