"""The `sqs` sink: each row a message to an Amazon SQS queue, sent with SendMessageBatch.

Every message carries its row's id (as the nats sink builds it: the sink, its commits so far,
the payload's SHA-256 and a count of equal rows) in the `rivc_id` attribute, the same on every
rerun. A queue is consumed by others and cannot be read back, so the commits and the ids SQS
accepted so far are in the warehouse (sentlog.py): a rerun after a kill sends only what SQS had
not accepted, and again only what was in flight or accepted in the last second. On a FIFO queue
the row's id is also its deduplication id (unless `deduplication_id_field` names a column), so
within SQS's five-minute deduplication window even those are dropped by the queue: exactly once.
An entry SQS failed on its side is sent again (up to `max_attempts`, with a doubling backoff);
one it refused as the sender's fault stops the sink, naming its code and message.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rivc.compiler.errors import ConnectorError

from ...plane.base import WriteResult
from ...util.faults import armed, fault
from ..payloads import encoder
from ..sentlog import LoggedSink, Progress
from .spec import SqsQueue, SqsSinkConfig

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads

BACKOFF_S = 0.2  # the first wait before an entry SQS failed on its side is sent again


def sqs_client(cfg: SqsQueue) -> Any:
    """boto3's SQS client for the queue: its region and endpoint, the config's keys or boto3's
    own chain."""
    import boto3

    keys: dict[str, Any] = {}
    if cfg.auth is not None:
        keys = {
            "aws_access_key_id": cfg.auth.access_key_id,
            "aws_secret_access_key": cfg.auth.secret_access_key,
            "aws_session_token": cfg.auth.session_token,
        }
    return boto3.client("sqs", region_name=cfg.region, endpoint_url=cfg.endpoint_url, **keys)


class SqsSink(LoggedSink[SqsSinkConfig]):
    def where_to(self) -> str:
        return f"sqs {self.config.queue_url}"

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        cfg = self.config
        payloads = encoder(cfg.payload, self.ctx.root, self.ctx.sink)
        # a row's FIFO group and deduplication id, by its payload (equal payloads, equal rows)
        fields: dict[bytes, tuple[str | None, str | None]] = {}

        def encode(batch: pa.RecordBatch) -> list[bytes]:
            out = payloads(batch)
            groups = self._column(batch, cfg.message_group_id_field)
            dedups = self._column(batch, cfg.deduplication_id_field)
            for i, payload in enumerate(out):
                fields[payload] = (groups[i], dedups[i])
            return out

        begun = self.begin(data, batch_id, self.where_to(), encode)
        if begun is None:
            return WriteResult()
        record, rows, progress = begun
        todo = [(mid, p, *fields[p]) for mid, p in rows if mid not in progress.sent]
        started = time.perf_counter()
        client = sqs_client(cfg)
        half = len(todo) // 2
        for at in range(0, len(todo), cfg.batch_size):
            self._send(client, todo[at : at + cfg.batch_size], progress)
            if at <= half < at + cfg.batch_size and half and armed("mid-publish", self.ctx.sink):
                progress.save()
                fault("mid-publish", self.ctx.sink)  # half of the messages accepted
        progress.save()
        fault("before-commit", self.ctx.sink)  # every message accepted; the commit not made
        self.commit(record, batch_id)
        return WriteResult(
            rows=len(todo),
            bytes=sum(len(p) for _, p, _, _ in todo),
            commits=1,
            commit_s=time.perf_counter() - started,
        )

    def _column(self, batch: pa.RecordBatch, name: str | None) -> list[str | None]:
        if name is None:
            return [None] * batch.num_rows
        values = batch.column(name).to_pylist()
        if any(v is None for v in values):
            raise ConnectorError(f"sink {self.ctx.sink}: a row with a NULL {name}")
        return [str(v) for v in values]

    def _entry(self, i: int, mid: str, payload: bytes, group: str | None, dedup: str | None) -> Any:
        cfg = self.config
        entry: dict[str, Any] = {
            "Id": str(i),
            "MessageBody": payload.decode("utf-8"),
            "MessageAttributes": {"rivc_id": {"DataType": "String", "StringValue": mid}},
        }
        if cfg.fifo:
            entry["MessageGroupId"] = group or cfg.message_group_id
            entry["MessageDeduplicationId"] = dedup or mid
        elif cfg.delay_seconds:
            entry["DelaySeconds"] = cfg.delay_seconds
        return entry

    def _send(
        self, client: Any, chunk: list[tuple[str, bytes, Any, Any]], progress: Progress
    ) -> None:
        """One SendMessageBatch; the entries SQS failed on its side sent again with backoff."""
        waiting = dict(enumerate(chunk))
        delay = BACKOFF_S
        for attempt in range(1, self.config.max_attempts + 1):
            entries = [self._entry(i, *row) for i, row in waiting.items()]
            try:
                answer = client.send_message_batch(QueueUrl=self.config.queue_url, Entries=entries)
            except Exception as exc:  # botocore's: the request as a whole did not go through
                text = " ".join(str(exc).split())[:300] or type(exc).__name__
                raise ConnectorError(f"sink {self.ctx.sink}: {self.where_to()}: {text}") from exc
            for ok in answer.get("Successful", []):
                progress.sent.add(waiting.pop(int(ok["Id"]))[0])
            failed = answer.get("Failed", [])
            refused = [f for f in failed if f.get("SenderFault")]
            if refused:
                f = refused[0]
                raise ConnectorError(
                    f"sink {self.ctx.sink}: {self.where_to()}: SQS refused message "
                    f"{waiting[int(f['Id'])][0]}: {f.get('Code')}: {f.get('Message', '')}"
                )
            progress.save(now=False)
            if not waiting:
                return
            if attempt < self.config.max_attempts:
                time.sleep(delay)
                delay *= 2
        f = failed[0]
        raise ConnectorError(
            f"sink {self.ctx.sink}: {self.where_to()}: SQS failed {len(waiting)} message(s) "
            f"{self.config.max_attempts} times: {f.get('Code')}: {f.get('Message', '')}"
        )
