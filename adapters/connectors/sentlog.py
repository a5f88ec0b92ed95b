"""What a sink whose target keeps nothing rivc can read (an HTTP endpoint, a RabbitMQ exchange)
commits, and where: in the warehouse, beside the checkpoints, `<warehouse>/_rivc_sent/<sink>/`.

- `commit.json`: the last batch id, the places of its inputs, the number of commits, the writer;
  written once the target confirmed every message of the batch.
- `sent.json`: the ids the target confirmed so far in the batch being sent (rewritten at most
  once a second), so a rerun after a kill sends only the rest.

Messages carry ids built as the nats sink builds them (`<sink>-<commits>-<sha256 of the row's
JSON>-<k>`, k numbering equal rows) and go out in the order of their ids: the same batch makes
the same messages, whoever computed it, so a receiver that deduplicates by id takes each row
once. The sinks built on this are at least once; what a kill can send twice is what was in
flight or confirmed in the last second.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rivc.compiler.errors import ConnectorError

from ..plane.base import C, Can, Sink, stream
from ..util.storage import Store, join
from .files.formats import json_objects

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads

AREA = "_rivc_sent"  # under the warehouse
RECORD_EVERY_S = 1.0  # sent.json is rewritten at most this often


class LoggedSink(Sink[C]):
    """A sink whose commits are in the warehouse's sent log."""

    can = frozenset({Can.RECORD_PLACES})

    @property
    def where(self) -> str:
        if not self.ctx.warehouse:
            raise ConnectorError(f"sink {self.ctx.sink}: no warehouse to keep its commits in")
        return join(self.ctx.warehouse, AREA, self.ctx.sink)

    def _read(self, name: str) -> dict[str, Any]:
        import pyarrow.fs as pafs

        fs, path = Store.of(self.where, self.ctx.storage).filesystem(join(self.where, name))
        if fs.get_file_info(path).type != pafs.FileType.File:
            return {}
        with fs.open_input_stream(path, compression=None) as handle:
            found: dict[str, Any] = json.loads(handle.read())
        return found

    def _write(self, name: str, body: dict[str, Any]) -> None:
        """Replace the file whole: written under a hidden name, then renamed (an object
        store's upload appears only when complete)."""
        fs, path = Store.of(self.where, self.ctx.storage).filesystem(join(self.where, name))
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        hidden = path.rsplit("/", 1)[0] + "/." + name + ".tmp"
        with fs.open_output_stream(hidden, compression=None) as out:
            out.write(json.dumps(body).encode())
        fs.move(hidden, path)

    def last_batch_id(self) -> int | None:
        version = self._read("commit.json").get("version")
        return None if version is None else int(version)

    def places(self, inputs: Sequence[str]) -> dict[str, int | None]:
        held = self._read("commit.json").get("places", {})
        return {i: held.get(self.ctx.place_id(i)) for i in inputs}

    def writer(self) -> str | None:
        found = self._read("commit.json").get("writer")
        return None if found is None else str(found)

    def record_places(self, batch_id: int) -> None:
        self.commit(self._read("commit.json"), batch_id)

    def commit(self, record: dict[str, Any], batch_id: int) -> None:
        places = {**record.get("places", {})}
        places.update({self.ctx.place_id(k): v for k, v in self.ctx.places.items()})
        self._write(
            "commit.json",
            {
                "sink": self.ctx.app_id,
                "writer": record.get("writer") or self.ctx.writer or None,
                "version": batch_id,
                "commits": int(record.get("commits") or 0) + 1,
                "places": places,
            },
        )

    def begin(
        self,
        data: pads.Dataset,
        batch_id: int,
        where: str,
        encode: Callable[[pa.RecordBatch], list[bytes]] | None = None,
    ) -> tuple[dict[str, Any], list[tuple[str, bytes]], Progress] | None:
        """None when the log holds the batch; else (the commit record, the batch's rows as
        (id, payload) in id order, the ids confirmed so far). A payload is the row's JSON object
        unless `encode` makes them. `where` names the target in a refusal of another writer."""
        record = self._read("commit.json")
        self.ctx.claim(record.get("writer"), where)
        version = record.get("version")
        if version is not None and int(version) >= batch_id:
            return None
        commits = int(record.get("commits") or 0)
        prefix = hashlib.sha1(self.ctx.app_id.encode()).hexdigest()[:12]
        rows: list[tuple[str, bytes]] = []
        counts: Counter[str] = Counter()
        for batch in stream(data):
            payloads = encode(batch) if encode else [t.encode() for t in json_objects(batch)]
            for payload in payloads:
                h = hashlib.sha256(payload).hexdigest()
                counts[h] += 1
                rows.append((f"{prefix}-{commits}-{h[:32]}-{counts[h]}", payload))
        rows.sort()
        found = self._read("sent.json")
        sent = set(found.get("keys", [])) if found.get("commits") == commits else set()
        return record, rows, Progress(self, sent, commits)


class Progress:
    """The ids the target confirmed in this commit's batch, saved to sent.json."""

    def __init__(self, sink: LoggedSink[Any], sent: set[str], commits: int) -> None:
        self.sink, self.sent, self.commits = sink, sent, commits
        self.saved = time.monotonic()

    def save(self, now: bool = True) -> None:
        """Rewrite sent.json (unless `now` is false and it was rewritten within a second)."""
        if not now and time.monotonic() - self.saved < RECORD_EVERY_S:
            return
        self.sink._write("sent.json", {"commits": self.commits, "keys": sorted(self.sent)})
        self.saved = time.monotonic()
