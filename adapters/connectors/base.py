"""What a sink connector is: a spec'd config, `committed(batch_id)` and `write(table, batch_id)`."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from rivc.compiler.errors import ConnectorError, did_you_mean

if TYPE_CHECKING:
    import pyarrow.dataset as pads

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class SinkContext:
    root: Path  # the project directory: relative paths in configs are relative to it
    project: str
    sink: str

    def path(self, value: str) -> str:
        """A local path relative to the project, or a URI (s3://...) as it is."""
        return value if "://" in value else str((self.root / value).resolve())

    @property
    def app_id(self) -> str:
        return f"rivc:{self.project}:{self.sink}"


@dataclass
class WriteResult:
    rows: int = 0
    bytes: int = 0
    files: list[tuple[str, int | None, int]] = field(default_factory=list)  # (path, rows, bytes)
    retries: int = 0


RETRY_DELAYS = (0.1, 0.2, 0.4)  # commit conflicts: exponential backoff


def commit_with_retries(
    attempt: Callable[[], R], conflict: type[BaseException], target: str
) -> tuple[R, int]:
    """Run a commit; after a conflict, wait 100, 200, then 400 ms and run it again (`attempt`
    re-reads the table each time). Returns (its result, retries)."""
    for retries, delay in enumerate((*RETRY_DELAYS, None)):
        try:
            return attempt(), retries
        except conflict as exc:
            if delay is None:
                raise ConnectorError(
                    f"commit to {target} failed after {retries} retries: {exc}"
                ) from exc
            time.sleep(delay)
    raise AssertionError("unreachable")


class Sink(ABC):
    """Idempotent per batch id: Spark replays a micro-batch after a failure."""

    def __init__(self, config: Any, ctx: SinkContext) -> None:
        self.config, self.ctx = config, ctx

    max_rows: int | None = None  # a sink that shows only the first rows asks for no more

    def committed(self, batch_id: int) -> bool:
        """True when the target already holds this batch (only sinks that can tell)."""
        return False

    def write_spark(self, df: Any, batch_id: int) -> WriteResult | None:
        """Write through Spark's executors and commit here; None when this sink cannot."""
        return None

    @abstractmethod
    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        """Write one batch; `data` is read in record batches, so memory stays bounded."""


def stream(data: pads.Dataset) -> Any:
    """A RecordBatchReader over `data` that reads ahead little: memory stays near one batch."""
    return data.scanner(
        batch_size=65_536, batch_readahead=1, fragment_readahead=1, use_threads=False
    ).to_reader()


class Registry(Generic[T]):
    def __init__(self, kind: str, entry_point_group: str) -> None:
        self.kind, self.group = kind, entry_point_group
        self._classes: dict[str, type[T]] = {}

    def register(self, name: str) -> Any:
        def deco(cls: type[T]) -> type[T]:
            self._classes[name] = cls
            return cls

        return deco

    def get(self, name: str) -> type[T]:
        if name not in self._classes:
            for ep in entry_points(group=self.group, name=name):
                self._classes[name] = ep.load()
        if name not in self._classes:
            raise ConnectorError(
                f"no runtime for {self.kind} connector {name!r} yet{did_you_mean(name, self._classes)}"
            )
        return self._classes[name]


SINKS: Registry[Sink] = Registry("sink", entry_point_group="rivc.sinks")


def sink_for(connector: str, config: Any, ctx: SinkContext) -> Sink:
    from . import delta, files, iceberg, stdout  # noqa: F401  (registers the built-ins)

    return SINKS.get(connector)(config, ctx)
