"""A fit's initial-weights checksum (initial_weights_sha256): SHA-256 over a list of SHA-256s.

The digest is SHA-256 over, for every weight in the model's own order, its header (`dtype[shape];`) followed by the
SHA-256 of each CHUNK_BYTES piece of its bytes, in order (an empty weight adds its header only). Each piece is
hashed on its own, so the pieces are hashed on every core the process may use (hashlib releases the GIL); the digest
does not depend on how many. The caller's thread reads the weights back meanwhile.

A weight's bytes come either whole (anything hashlib reads: the weight already on the host) or from a `ChunkReader`
(a weight on a device): each piece is then copied into one of a few host buffers that are reused from piece to
piece. Reading a 7B model back into fresh host memory touched every page of it once more: on a virtual machine the
first touch of a page is dear, so a handful of reused buffers replace many gigabytes of new ones.
"""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable, Protocol, runtime_checkable

import numpy as np

# A piece of a weight hashed on its own. Part of the digest's definition: changing it changes every digest.
CHUNK_BYTES = 16 << 20
# Pieces read but not yet hashed, per hashing thread: the bound on the host memory the checksum holds.
PIECES_PER_WORKER = 2


@runtime_checkable
class ChunkReader(Protocol):
    """A weight's bytes on a device, read back piece by piece."""

    nbytes: int

    def read_into(self, offset: int, out: np.ndarray) -> None:
        """Copy bytes [offset, offset + out.size) of the weight into `out` (uint8, on the host)."""


# One weight as the cell's framework holds it: dtype name, shape, and its bytes (bytes-like, or a ChunkReader).
WeightBytes = tuple[str, tuple[int, ...], Any]


def usable_cores() -> int:
    """The cores this process may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def header(dtype: str, shape: Iterable[int]) -> bytes:
    # dtype and shape first, so that the same bytes in another layout or type hash differently.
    return f"{dtype}{list(shape)};".encode()


def weights_sha256(weights: Iterable[WeightBytes], *, workers: int | None = None) -> str:
    """The digest described above. A failure reading a weight or hashing a piece is raised, never a partial digest."""
    workers = workers or usable_cores()
    slots = threading.Semaphore(workers * PIECES_PER_WORKER)
    free_buffers: list[np.ndarray] = []
    failed: list[BaseException] = []
    parts: list[bytes | Future] = []

    def hashed(piece: Any, release: Any) -> bytes:
        try:
            return hashlib.sha256(piece).digest()
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread, below
            failed.append(exc)
            raise
        finally:
            release()

    def buffer() -> np.ndarray:
        # At most one buffer per slot exists: a slot is held from taking a buffer until its piece is hashed.
        try:
            return free_buffers.pop()
        except IndexError:
            return np.empty(CHUNK_BYTES, dtype=np.uint8)

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="weights-sha256")
    try:
        for dtype, shape, data in weights:
            parts.append(header(dtype, shape))
            if isinstance(data, ChunkReader):
                for offset in range(0, data.nbytes, CHUNK_BYTES):
                    slots.acquire()
                    out = buffer()
                    size = min(CHUNK_BYTES, data.nbytes - offset)
                    try:
                        data.read_into(offset, out[:size])
                    except BaseException:
                        free_buffers.append(out)
                        slots.release()
                        raise

                    def release(out: np.ndarray = out) -> None:
                        free_buffers.append(out)
                        slots.release()

                    parts.append(pool.submit(hashed, out[:size], release))
            else:
                whole = memoryview(data).cast("B")
                for offset in range(0, whole.nbytes, CHUNK_BYTES):
                    slots.acquire()
                    parts.append(pool.submit(hashed, whole[offset:offset + CHUNK_BYTES], slots.release))
            if failed:
                break
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else part.result())
    return digest.hexdigest()
