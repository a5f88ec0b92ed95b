"""The `rabbitmq` source: a queue as a PySpark Python streaming data source, each message
acknowledged once the sink committed the batch that holds it.

A queue keeps a message until it is acknowledged, and gives the unacknowledged ones back, in
their order, to the next consumer when a connection closes. The reader (in Spark's driver-side
Python worker, for the whole query) takes messages with `basic.get`, unacknowledged, numbers them
from the first offset Spark asks for, and keeps them: `partitions(start, end)` ships the kept
messages of [start, end); `commit(end)`, which Spark calls once the sink committed, acknowledges
every message below `end`. After a kill the queue gives the unacknowledged messages back in order
and the numbering starts again at Spark's checkpoint, so a batch Spark planned and had not
committed is read again with the same messages.

At least once: a kill after the sink committed a batch and before its acknowledgement (Spark
acknowledges a batch when it plans the next) delivers that batch's messages again, with
`rabbitmq_redelivered` true and their `message_id` (the rabbitmq sink sets it) for a merge sink
or a reader to deduplicate by.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.secrets import with_secrets

from ...plane.base import SourceContext, register_data_source
from ..payloads import decode_stream
from .sink import url_with_password
from .spec import RabbitmqSourceConfig

NAME = "rivc_rabbitmq"
SCHEMA = (
    "payload binary, exchange string, routing_key string, message_id string, "
    "redelivered boolean, ts timestamp"
)
REDELIVERY_WAIT_S = 10.0  # the queue gives unacknowledged messages back in this time


class Kept(InputPartition):
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        super().__init__(len(rows))
        self.rows = rows


class RabbitmqSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return RabbitmqStreamReader(dict(self.options))


class RabbitmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Connects on first use (Spark pickles it before): the connection holds the kept
    messages unacknowledged, and has no heartbeat, so Spark's time between calls cannot close
    it."""

    def __init__(self, options: dict[str, str]) -> None:
        self.cfg = RabbitmqSourceConfig.model_validate(json.loads(options["config"]))
        self.url = options["url"]
        self.conn: Any = None
        self.channel: Any = None
        self.base: int | None = None  # the offset of kept[0]
        self.kept: list[tuple[int, tuple[Any, ...]]] = []  # (delivery tag, row)
        self.target: int | None = None  # available_now: the end of this run

    def _connect(self) -> None:
        if self.channel is not None and self.conn.is_open:
            return
        import pika

        params = pika.URLParameters(self.url)
        params.heartbeat = 0
        params.blocked_connection_timeout = 300
        try:
            self.conn = pika.BlockingConnection(params)
            self.channel = self.conn.channel()
            self.channel.queue_declare(self.cfg.queue, passive=True)
        except Exception as exc:  # pika's: a missing queue closes the channel with 404
            raise ConnectorError(
                f"rabbitmq queue {self.cfg.queue}: {' '.join(str(exc).split()) or type(exc).__name__}"
            ) from None

    def _take(self, upto: int) -> None:
        """Take messages until `upto` are kept or the queue has none ready."""
        while len(self.kept) < upto:
            method, props, body = self.channel.basic_get(self.cfg.queue, auto_ack=False)
            if method is None:
                return
            ts = props.timestamp
            self.kept.append(
                (
                    method.delivery_tag,
                    (
                        body,
                        method.exchange,
                        method.routing_key,
                        props.message_id,
                        bool(method.redelivered),
                        datetime.fromtimestamp(ts, UTC) if ts else None,
                    ),
                )
            )

    def _ready(self) -> int:
        return int(self.channel.queue_declare(self.cfg.queue, passive=True).method.message_count)

    # ------------------------------------------------------------------ Spark

    def initialOffset(self) -> dict[str, int]:
        return {"n": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        self._connect()
        self.target = len(self.kept) + self._ready()  # relative to base, set on first use

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        self._connect()
        begin = int(start["n"])
        if self.base is None:
            self.base = begin
        self._acknowledge(begin)
        cap = self.cfg.max_messages_per_trigger
        if isinstance(limit, ReadMaxRows):
            cap = min(cap, limit.max_rows)
        want = begin - self.base + cap
        if self.target is not None:
            want = min(want, self.target)
        self._take(want)
        return {"n": self.base + min(len(self.kept), want)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Kept]:
        self._connect()
        lo, hi = int(start["n"]), int(end["n"])
        if self.base is None:  # a restart replays the batch Spark planned
            self.base = lo
        deadline = time.monotonic() + REDELIVERY_WAIT_S
        while len(self.kept) < hi - self.base and time.monotonic() < deadline:
            self._take(hi - self.base)
            if len(self.kept) < hi - self.base:
                time.sleep(0.1)
        if len(self.kept) < hi - self.base:
            raise ConnectorError(
                f"rabbitmq queue {self.cfg.queue} gives back {len(self.kept)} of the "
                f"{hi - self.base} unacknowledged messages of the batch Spark planned: another "
                "consumer took them, or the queue was purged"
            )
        return [Kept([row for _, row in self.kept[lo - self.base : hi - self.base]])]

    def read(self, partition: Kept) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        return iter(partition.rows)

    def commit(self, end: dict[str, int]) -> None:
        self._acknowledge(int(end["n"]))

    def _acknowledge(self, upto: int) -> None:
        """The sink holds every message below `upto`: acknowledge them (one basic.ack with
        multiple) and forget them."""
        if self.base is None or upto <= self.base or self.channel is None:
            return
        done = min(upto - self.base, len(self.kept))
        if done:
            self.channel.basic_ack(self.kept[done - 1][0], multiple=True)
            del self.kept[:done]
        self.base += done
        if self.target is not None:
            self.target -= done

    def stop(self) -> None:
        if self.conn is not None and self.conn.is_open:
            self.conn.close()  # what is kept goes back to the queue, unacknowledged
        self.conn = self.channel = None


def read(spark: Any, ctx: SourceContext[RabbitmqSourceConfig]) -> Any:
    """The registry's entry point: the queue as the table's declared columns."""
    cfg: RabbitmqSourceConfig = ctx.config
    register_data_source(spark, RabbitmqSource)
    raw = (
        spark.readStream.format(NAME)
        .option("config", with_secrets(cfg))
        .option("url", url_with_password(cfg.url, cfg.password_env))
        .load()
    )
    metadata = {
        "rabbitmq_exchange": "exchange",
        "rabbitmq_routing_key": "routing_key",
        "rabbitmq_message_id": "message_id",
        "rabbitmq_redelivered": "redelivered",
        "rabbitmq_timestamp": "ts",
    }
    return decode_stream(
        raw, ctx, metadata, "concat('queue message ', coalesce(message_id, '(no id)'))"
    )
