"""The stdout sink: JSON lines (or indented JSON with `pretty`) for a look at a batch."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from ...plane.base import Sink, WriteResult
from .spec import StdoutSinkConfig

if TYPE_CHECKING:
    import pyarrow.dataset as pads


class StdoutSink(Sink[StdoutSinkConfig]):
    @property
    def max_rows(self) -> int | None:  # type: ignore[override]
        return self.config.limit

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        rows = data.to_table().to_pylist()  # the runtime already limited the batch
        indent = 2 if self.config.pretty else None
        out = "".join(json.dumps(r, default=str, indent=indent) + "\n" for r in rows)
        sys.stdout.write(out)
        sys.stdout.flush()
        return WriteResult(rows=len(rows), bytes=len(out.encode()))
