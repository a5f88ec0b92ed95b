"""The state store `.rivc/state.db` (a record of runs, node results, schemas, batches and files)
and the run lock."""

from .base import NodeResult, new_run_id, now
from .lock import run_lock, running
from .store import MIGRATIONS, StateStore, migrate

__all__ = [
    "MIGRATIONS",
    "NodeResult",
    "StateStore",
    "migrate",
    "new_run_id",
    "now",
    "run_lock",
    "running",
]
