"""The `sqs` source: a queue as a PySpark Python streaming data source, each message deleted from
the queue once the sink committed the batch that holds it.

SQS gives a received message back to any consumer, in any order, once its visibility timeout
runs out, so a batch Spark planned could not be read again from the queue as it was. The reader
(in Spark's driver-side Python worker, for the whole query) therefore spools each message it
receives under `.rivc/spool/<source>.<table>/` (spool.py) with its id and receipt handle,
fsynced before Spark sees its offset: an offset is a spool sequence, `partitions(start, end)`
reads [start, end) from the spool, the same messages every time, and `commit(end)` deletes the
messages below `end` from the queue with their newest receipt handles, then the spool's
segments. A message received again (its visibility timeout ran out while its batch was under
way, or a killed run's in flight) is known by its id and not spooled twice.

At least once: a lost spool (a lost `.rivc/`) with messages the sink committed and the queue
still holds delivers them again, with `sqs_message_id` for a merge sink or a reader to
deduplicate by.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.locate import STATE_DIR
from rivc.compiler.loading.secrets import with_secrets

from ...plane.base import SourceContext, register_data_source
from ..payloads import decode_stream
from ..spool import Spool, spooled, unspooled
from .sink import sqs_client
from .spec import SqsSourceConfig

NAME = "rivc_sqs"
SCHEMA = "payload binary, message_id string, sent_at timestamp, group_id string, receives int"
DRAIN_LIMIT = 1_000_000  # available_now: most messages taken at the start of one run


class Spooled(InputPartition):
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        super().__init__(len(rows))
        self.rows = rows


class SqsSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return SqsStreamReader(dict(self.options))


class SqsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Opens the queue and the spool on first use (Spark pickles it before)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.cfg = SqsSourceConfig.model_validate(json.loads(options["config"]))
        self.path = Path(options["spool"])
        self.client: Any = None
        self.spool: Spool | None = None
        self.handles: dict[str, str] = {}  # spooled, not yet deleted: message id -> newest handle
        # deleted by this reader, with when: a late copy (its visibility ran out before the
        # delete) is deleted again; forgotten after twice the visibility timeout
        self.deleted: dict[str, float] = {}
        self.done = 0  # the offset below which this reader has deleted what the spool holds
        self.target: int | None = None  # available_now: the end of this run

    def _open(self) -> Spool:
        if self.spool is None:
            self.client = sqs_client(self.cfg)
            self.spool = Spool(self.path, writer=True)
            if self.spool.next > self.spool.first:  # a restart: what it spooled is not deleted
                for record in self.spool.read(self.spool.first, self.spool.next):
                    self.handles[record["id"]] = record["h"]
        return self.spool

    def _receive(self, upto: int) -> None:
        """Receive until the spool's end reaches `upto` or the queue gives nothing more."""
        spool = self._open()
        while spool.next < upto:
            try:
                got = self.client.receive_message(
                    QueueUrl=self.cfg.queue_url,
                    MaxNumberOfMessages=min(10, upto - spool.next),
                    WaitTimeSeconds=self.cfg.wait_time_s,
                    VisibilityTimeout=self.cfg.visibility_timeout_s,
                    AttributeNames=["All"],
                ).get("Messages", [])
            except Exception as exc:  # botocore's
                text = " ".join(str(exc).split())[:300] or type(exc).__name__
                raise ConnectorError(f"sqs queue {self.cfg.queue_url}: {text}") from exc
            if not got:
                return
            again = []
            for m in got:
                mid, handle = m["MessageId"], m["ReceiptHandle"]
                if mid in self.deleted:
                    again.append(handle)
                elif mid in self.handles:
                    self.handles[mid] = handle  # seen again: the newest handle deletes it
                else:
                    attrs = m.get("Attributes", {})
                    spool.append(
                        {
                            **spooled(m["Body"].encode()),
                            "id": mid,
                            "h": handle,
                            "s": int(attrs.get("SentTimestamp", 0)),
                            "g": attrs.get("MessageGroupId"),
                            "n": int(attrs.get("ApproximateReceiveCount", 1)),
                        }
                    )
                    self.handles[mid] = handle
            spool.sync()  # durable before Spark can plan a batch of them
            self._delete(again)

    def _delete(self, handles: list[str]) -> None:
        for at in range(0, len(handles), 10):
            entries = [
                {"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(handles[at : at + 10])
            ]
            try:
                self.client.delete_message_batch(QueueUrl=self.cfg.queue_url, Entries=entries)
            except Exception as exc:  # botocore's
                text = " ".join(str(exc).split())[:300] or type(exc).__name__
                raise ConnectorError(f"sqs queue {self.cfg.queue_url}: {text}") from exc

    # ------------------------------------------------------------------ Spark

    def initialOffset(self) -> dict[str, int]:
        return {"seq": self._open().first_segment()}

    def prepareForTriggerAvailableNow(self) -> None:
        spool = self._open()
        self._receive(spool.next + DRAIN_LIMIT)
        self.target = spool.next

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        spool = self._open()
        begin = int(start["seq"])
        if spool.next < begin:  # the spool was removed, the checkpoint kept
            spool.reseed(begin)
            self.handles.clear()
        self.commit(start)  # Spark plans from its last commit: the sink holds what is below
        cap = self.cfg.max_messages_per_trigger
        if isinstance(limit, ReadMaxRows):
            cap = min(cap, limit.max_rows)
        want = begin + cap
        if self.target is not None:
            want = min(want, self.target)
        else:
            self._receive(want)
        return {"seq": max(begin, min(spool.next, want))}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Spooled]:
        records = self._open().read(int(start["seq"]), int(end["seq"]))
        rows = [
            (
                unspooled(r),
                r["id"],
                datetime.fromtimestamp(r["s"] / 1000, UTC) if r["s"] else None,
                r["g"],
                r["n"],
            )
            for r in records
        ]
        return [Spooled(rows)]

    def read(self, partition: Spooled) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        return iter(partition.rows)

    def commit(self, end: dict[str, int]) -> None:
        """The sink holds every message below `end`: delete them from the queue, then from the
        spool. Spark calls it when it plans the batch after (a run's last batch: on the next
        run's first plan)."""
        spool = self._open()
        upto = min(int(end["seq"]), spool.next)
        start = max(spool.first_segment(), self.done)
        if upto <= start:
            return
        done = [r["id"] for r in spool.read(start, upto)]
        self._delete([self.handles[m] for m in done if m in self.handles])
        now = time.monotonic()
        for m in done:
            self.handles.pop(m, None)
            self.deleted[m] = now
        horizon = now - 2 * self.cfg.visibility_timeout_s
        while self.deleted and next(iter(self.deleted.values())) < horizon:
            del self.deleted[next(iter(self.deleted))]  # oldest first: insertion order
        self.done = upto
        spool.commit(upto)

    def stop(self) -> None:
        if self.spool is not None:
            self.spool.close()
            self.spool = None


def read(spark: Any, ctx: SourceContext[SqsSourceConfig]) -> Any:
    """The registry's entry point: the queue as the table's declared columns."""
    cfg: SqsSourceConfig = ctx.config
    register_data_source(spark, SqsSource)
    raw = (
        spark.readStream.format(NAME)
        .option("config", with_secrets(cfg))
        .option("spool", str(ctx.root / STATE_DIR / "spool" / ctx.name))
        .load()
    )
    metadata = {
        "sqs_message_id": "message_id",
        "sqs_sent_at": "sent_at",
        "sqs_group_id": "group_id",
        "sqs_receive_count": "receives",
    }
    return decode_stream(raw, ctx, metadata, "concat('message ', message_id)")
