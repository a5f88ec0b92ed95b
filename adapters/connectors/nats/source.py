"""The `nats` source: a JetStream stream as a PySpark Python streaming data source.

A JetStream stream keeps its messages, numbered by stream sequence, so unlike MQTT no spool is
needed: an offset is a stream sequence, `partitions(start, end)` reads the messages of
[start, end) again from the server (on the executors, through ordered consumers), and a
failed batch is read again the same way. The checkpoint under the warehouse is the truth of
what the sink took. The server's durable consumer (`durable`) follows it: Spark's `commit(end)`,
after the sink committed the batch, acknowledges every message below `end`, so a stream with
interest or work-queue retention keeps each message until it is in the sink, and `nats consumer
info` shows the lag. A stream with no checkpoint starts after the durable consumer's
acknowledged messages, or at `start` (first or new) when there is none.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.secrets import with_secrets

from ...plane.base import SourceContext, register_data_source
from ..payloads import decode_stream
from .sink import connect, durable_name, run, server_params, subject_matches
from .spec import NatsSourceConfig

NAME = "rivc_nats"
SCHEMA = "payload binary, subject string, seq bigint, time timestamp"
PARTITION_SEQS = 50_000  # sequences read by one Spark task
WAIT_S = 5.0  # a message the stream holds arrives in this time


class SeqRange(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start, self.end = start, end


class NatsSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return NatsStreamReader(dict(self.options))


class NatsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Holds no connection: Spark pickles it to the executors, which read by sequence."""

    def __init__(self, options: dict[str, str]) -> None:
        self.cfg = NatsSourceConfig.model_validate(json.loads(options["config"]))
        self.params = server_params(self.cfg)
        if options.get("password"):
            self.params["password"] = options["password"]
        if options.get("token"):
            self.params["token"] = options["token"]
        self.durable = options["durable"]
        self.target: int | None = None  # available_now: the end of this run
        self.acked = 0  # the highest sequence this reader acknowledged

    # one filter goes to the server; several are matched here (NATS 2.9 takes one per consumer)
    def _filter(self) -> str | None:
        return self.cfg.subjects[0] if len(self.cfg.subjects) == 1 else None

    def _wanted(self, subject: str) -> bool:
        return not self.cfg.subjects or any(subject_matches(s, subject) for s in self.cfg.subjects)

    def _state(self) -> Any:
        async def go() -> Any:
            nc = await connect(self.params)
            try:
                return (await nc.jetstream().stream_info(self.cfg.stream)).state
            finally:
                await nc.close()

        return run(go())

    # ------------------------------------------------------------------ Spark

    def initialOffset(self) -> dict[str, int]:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
        from nats.js.errors import NotFoundError

        async def go() -> int:
            nc = await connect(self.params)
            try:
                jsm = nc.jetstream()
                state = (await jsm.stream_info(self.cfg.stream)).state
                try:
                    held = await jsm.consumer_info(self.cfg.stream, self.durable)
                    # after its acknowledged messages (where it was made to start, before
                    # any), and never before what the stream still holds
                    after = int(held.ack_floor.stream_seq) + 1
                    return max(after, held.config.opt_start_seq or 1, int(state.first_seq))
                except NotFoundError:
                    pass
                first = state.first_seq if self.cfg.start == "first" else state.last_seq + 1
                await jsm.add_consumer(
                    self.cfg.stream,
                    ConsumerConfig(
                        durable_name=self.durable,
                        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                        opt_start_seq=max(first, 1),
                        ack_policy=AckPolicy.ALL,
                        filter_subject=self._filter(),
                        headers_only=True,
                        ack_wait=60,
                    ),
                )
                return int(max(first, 1))
            finally:
                await nc.close()

        return {"seq": run(go())}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = int(self._state().last_seq) + 1

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        begin = int(start["seq"])
        # Spark plans a batch once the one before is committed, and calls commit() for the
        # last batch of a run only in the next: acknowledge here what is below the next batch
        self._acknowledge(begin)
        end = int(self._state().last_seq) + 1
        if self.target is not None:
            end = min(end, self.target)
        cap = self.cfg.max_messages_per_trigger
        if isinstance(limit, ReadMaxRows):
            cap = min(cap, limit.max_rows)
        return {"seq": max(begin, min(end, begin + cap))}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[SeqRange]:
        lo, hi = int(start["seq"]), int(end["seq"])
        first = int(self._state().first_seq)
        if lo < first and hi > lo:
            raise ConnectorError(
                f"NATS stream {self.cfg.stream} no longer holds messages {lo}..{first - 1} "
                "(its limits or retention removed them before this source read them): they are "
                "lost to the sink; to accept it, remove the sink's checkpoint and the stream goes "
                "on from the first message the stream still holds"
            )
        return [SeqRange(s, min(s + PARTITION_SEQS, hi)) for s in range(lo, hi, PARTITION_SEQS)]

    def read(self, partition: SeqRange) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        rows: list[tuple[Any, ...]] = run(self._read(partition.start, partition.end))
        return iter(rows)

    async def _read(self, start: int, end: int) -> list[tuple[Any, ...]]:
        """The wanted messages with sequences in [start, end), delivered to a callback (three
        times the rate of awaiting them one by one)."""
        import asyncio

        from nats.js.api import ConsumerConfig, DeliverPolicy

        out: list[tuple[Any, ...]] = []
        done = asyncio.Event()

        async def take(msg: Any) -> None:
            if done.is_set():
                return
            meta = msg.metadata
            seq = int(meta.sequence.stream)
            if seq < end and self._wanted(msg.subject):
                out.append((msg.data, msg.subject, seq, meta.timestamp.astimezone(UTC)))
            if seq >= end - 1 or meta.num_pending == 0:
                done.set()

        nc = await connect(self.params)
        try:
            sub = await nc.jetstream().subscribe(
                self._filter() or ">",
                stream=self.cfg.stream,
                ordered_consumer=True,
                cb=take,
                config=ConsumerConfig(
                    deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start
                ),
            )
            try:
                info = await sub.consumer_info()  # delivered ones are no longer pending
                if not (info.num_pending or info.delivered.consumer_seq):
                    return out
                seen = -1
                while not done.is_set() and len(out) != seen:  # stop when nothing more comes
                    seen = len(out)
                    try:
                        await asyncio.wait_for(done.wait(), WAIT_S)
                    except TimeoutError:
                        pass
            finally:
                await sub.unsubscribe()
        finally:
            await nc.close()
        return out

    def commit(self, end: dict[str, int]) -> None:
        """The sink holds everything below `end`: acknowledge it on the durable consumer."""
        self._acknowledge(int(end["seq"]))

    def _acknowledge(self, upto: int) -> None:
        if upto - 1 <= self.acked:
            return

        async def go() -> None:
            nc = await connect(self.params)
            acked = self.acked
            try:
                js = nc.jetstream()
                floor = (await js.consumer_info(self.cfg.stream, self.durable)).ack_floor
                acked = int(floor.stream_seq)
                sub = await js.pull_subscribe_bind(self.durable, stream=self.cfg.stream)
                while acked < upto - 1:
                    # never more than [acked + 1, upto) can hold: a message fetched past `upto`
                    # waits, unacknowledged, for a later commit to acknowledge it
                    try:
                        msgs = await sub.fetch(min(upto - 1 - acked, 1000), timeout=1)
                    except TimeoutError:
                        return
                    below = [m for m in msgs if m.metadata.sequence.stream < upto]
                    if not below:
                        return
                    await below[-1].ack_sync()  # acknowledges every message before it too
                    acked = int(below[-1].metadata.sequence.stream)
                    if len(below) < len(msgs):
                        return
            finally:
                self.acked = max(self.acked, acked)
                await nc.close()

        run(go())


def read(spark: Any, ctx: SourceContext[NatsSourceConfig]) -> Any:
    """The registry's entry point: the stream of `ctx.name` as the declared columns."""
    import os

    cfg: NatsSourceConfig = ctx.config
    durable = durable_name(cfg, ctx.project, ctx.name)
    password = cfg.password or (os.environ.get(cfg.password_env) if cfg.password_env else None)
    token = os.environ.get(cfg.token_env) if cfg.token_env else None
    register_data_source(spark, NatsSource)
    raw = (
        spark.readStream.format(NAME)
        .option("config", with_secrets(cfg))
        .option("durable", durable)
        .option("password", password or "")  # resolved here: executors may lack the env
        .option("token", token or "")
        .load()
    )
    metadata = {"nats_subject": "subject", "nats_seq": "seq", "nats_time": "time"}
    return decode_stream(raw, ctx, metadata, "concat('subject ', subject, ' seq ', seq)")
