"""One run at a time: `.rivc/run.lock`, an flock, so a crashed run never leaves it taken."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rivc.compiler.errors import StateError
from rivc.compiler.loading.locate import STATE_DIR

from .base import now


def _holder(fd: int) -> str:
    holder = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    try:
        info = json.loads(holder)
        return f"run {info['run_id']} (pid {info['pid']}, started {info['started_at']})"
    except (ValueError, KeyError):
        return "another run"


def running(root: Path) -> str | None:
    """The run that holds the project's run lock now, or None."""
    path = root / STATE_DIR / "run.lock"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(fd)
    finally:
        os.close(fd)
    return None


@contextmanager
def run_lock(root: Path, run_id: str) -> Iterator[None]:
    """Hold the project's run lock; a second run gets a StateError naming the running one."""
    path = root / STATE_DIR / "run.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StateError(
                f"{path.relative_to(root)}: {_holder(fd)} is using this project's state store; "
                "wait for it to finish"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(
            fd,
            json.dumps({"run_id": run_id, "pid": os.getpid(), "started_at": now()}).encode(),
            0,
        )
        yield
    finally:
        os.close(fd)  # closing releases the flock
