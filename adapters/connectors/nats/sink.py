"""NATS JetStream: the `nats` sink, exactly once per batch, and what the source shares with it.

Each row is a message on the sink's subject in its `payload:` format (a JSON object by default:
rivc.adapters.plane.payloads), with a message id
built from the sink, its commits so far and the row: `<sink>-<commits>-<sha256 of the
payload>-<n>`, n numbering rows with the same payload. The id is the same however Spark splits
the batch and whichever run tries it, so:
- within the stream's `duplicate_window` the server drops a message it already holds (a retried
  task);
- a batch that a killed run left half published is finished by the next run (whose batch
  consumes the same input, or more), which first reads the headers of the messages published
  since the last commit and skips the ids it finds there, whatever the window.
The batch id, the places of the sink's inputs and the stream's last sequence are committed in
the key-value bucket `rivc_commits_<stream>` beside the stream, one key per sink, updated only
if no other writer changed it since the batch began. That key is the truth a rerun, a fresh clone or a lost
`.rivc/` reads.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.secrets import mask_url

from ...plane.base import Can, Sink, WriteResult, stream
from ...util.faults import fault
from ..payloads import Encoder, encoder
from .spec import NatsServer, NatsSinkConfig

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads

BUCKET = "rivc_commits_"  # + the stream's name: the key-value bucket of its sinks' commits
REFUSED = "the stream refused a message:"  # a task's error, found again in Spark's
IN_FLIGHT = 2_000  # messages published before their acknowledgements are awaited
SCAN_WAIT_S = 5.0


def server_params(cfg: NatsServer) -> dict[str, Any]:
    """nats.connect()'s arguments (picklable: Spark's tasks connect with them)."""
    password = cfg.password or (os.environ.get(cfg.password_env) if cfg.password_env else None)
    token = os.environ.get(cfg.token_env) if cfg.token_env else None
    params: dict[str, Any] = {
        "servers": [u.strip() for u in cfg.url.split(",")],
        "connect_timeout": 5,
        "max_reconnect_attempts": 3,
        "allow_reconnect": True,
    }
    if cfg.username:
        params.update(user=cfg.username, password=password)
    if token:
        params["token"] = token
    return params


async def connect(params: dict[str, Any]) -> Any:
    """nats.connect, bounded: nats-py (2.16) never returns when every server refuses the
    connection, so a refused server is given connect_timeout per server, twice, then named."""
    import nats

    async def quiet(_exc: Exception) -> None:  # nats-py prints errors unless given a callback
        return None

    servers = params["servers"]
    budget = float(params.get("connect_timeout", 5)) * 2 * len(servers) + 1
    try:
        return await asyncio.wait_for(nats.connect(**params, error_cb=quiet), budget)
    except TimeoutError:
        where = ", ".join(mask_url(s) for s in servers)
        raise ConnectionError(f"no NATS server answered at {where} in {budget:.0f}s") from None


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS's subject matching: `*` one token, `>` one or more at the end."""
    want, got = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(got) > i
        if i >= len(got) or (token != "*" and token != got[i]):
            return False
    return len(want) == len(got)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class JetStreamSink(Sink[NatsSinkConfig]):
    can = frozenset({Can.RECORD_PLACES, Can.WRITE_FROM_SPARK})

    @property
    def prefix(self) -> str:
        return hashlib.sha1(self.ctx.app_id.encode()).hexdigest()[:12]

    def encoder(self) -> Encoder:
        """The rows of a batch as payloads in the sink's format."""
        return encoder(self.config.payload, self.ctx.root, self.ctx.sink)

    def id_prefix(self, record: dict[str, Any]) -> str:
        """What the ids of the next commit's messages begin with: a retried batch's are the
        same, the next commit's differ (an equal row in a later batch is a new message)."""
        return f"{self.prefix}-{int(record.get('commits') or 0)}-"

    @property
    def key(self) -> str:
        """This sink's key in the stream's bucket."""
        return hashlib.sha1(self.ctx.app_id.encode()).hexdigest()[:24]

    def fail(self, what: str, exc: BaseException | None = None) -> ConnectorError:
        tail = f": {one_line(exc)}" if exc is not None else ""
        return ConnectorError(f"sink {self.ctx.sink}: stream {self.config.stream}: {what}{tail}")

    def _call(self, what: str, work: Callable[[Any, Any], Any]) -> Any:
        """Run `work(nc, js)` on a fresh connection; the server's errors as one line."""

        async def go() -> Any:
            nc = await connect(server_params(self.config))
            try:
                return await work(nc, nc.jetstream())
            finally:
                await nc.close()

        try:
            return run(go())
        except ConnectorError:
            raise
        except Exception as exc:  # nats-py's errors, connection refused
            raise self.fail(what, exc) from exc

    # ------------------------------------------------------------------ what it holds

    def _record(self) -> dict[str, Any]:
        async def work(_nc: Any, js: Any) -> dict[str, Any]:
            kv = await _bucket(js, self.config.stream, create=False)
            if kv is None:
                return {}
            return (await _get(kv, self.key))[0]

        found: dict[str, Any] = self._call("cannot read its commits", work)
        return found

    def last_batch_id(self) -> int | None:
        version = self._record().get("version")
        return None if version is None else int(version)

    def places(self, inputs: Sequence[str]) -> dict[str, int | None]:
        held = self._record().get("places", {})
        return {i: held.get(self.ctx.place_id(i)) for i in inputs}

    def writer(self) -> str | None:
        found = self._record().get("writer")
        return None if found is None else str(found)

    def record_places(self, batch_id: int) -> None:
        async def work(_nc: Any, js: Any) -> None:
            kv = await _bucket(js, self.config.stream, create=True)
            record, revision = await _get(kv, self.key)
            await self._commit(js, kv, record, revision, batch_id)

        self._call("cannot commit", work)

    # ------------------------------------------------------------------ writes

    def write_spark(self, df: Any, batch_id: int) -> WriteResult:
        """Spark's tasks encode the rows, number equal payloads and publish; rivc commits."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        begun = self._begin(batch_id)
        if begun is None:
            return WriteResult()
        record, sent = begun
        encoded = df.mapInArrow(_encode_task(self.encoder()), "payload binary")
        hashed = encoded.withColumn("h", F.sha2("payload", 256))
        numbered = hashed.withColumn("n", F.row_number().over(Window.partitionBy("h").orderBy("h")))
        task = _publish_task(
            server_params(self.config),
            self.config.subject,
            self.config.stream,
            self.id_prefix(record[0]),
            frozenset(sent),
        )
        try:
            counted = numbered.mapInArrow(task, "rows long, bytes long").groupBy().sum().first()
        except Exception as exc:  # a task's refusal, inside Spark's error
            found = re.search(re.escape(REFUSED) + r"[^\n]*", str(exc))
            if found is None:
                raise
            raise self.fail(found.group(0)) from None
        rows, size = (int(counted[0] or 0), int(counted[1] or 0)) if counted else (0, 0)
        return self._finish(batch_id, record, rows, size)

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        """Files delivered as they are: published from rivc's process."""
        begun = self._begin(batch_id)
        if begun is None:
            return WriteResult()
        record, sent = begun
        counts: Counter[str] = Counter()
        prefix = self.id_prefix(record[0])
        encode = self.encoder()

        def messages() -> Iterator[tuple[str, bytes]]:
            for batch in stream(data):
                for payload in encode(batch):
                    h = hashlib.sha256(payload).hexdigest()
                    counts[h] += 1
                    yield f"{prefix}{h[:32]}-{counts[h]}", payload

        try:
            rows, size = run(
                _publish(
                    server_params(self.config),
                    self.config.subject,
                    self.config.stream,
                    messages(),
                    frozenset(sent),
                    in_process=True,
                )
            )
        except RuntimeError as exc:
            if REFUSED not in str(exc):
                raise
            raise self.fail(str(exc)) from None
        except Exception as exc:  # nats-py's errors
            raise self.fail(f"batch {batch_id} was not published", exc) from exc
        return self._finish(batch_id, record, rows, size)

    def _begin(self, batch_id: int) -> tuple[tuple[dict[str, Any], int], set[str]] | None:
        """Make the stream and this sink's key if needed and claim them; None when the stream
        holds the batch; else (the key's record and revision, the ids of this batch the stream
        already holds)."""

        async def work(_nc: Any, js: Any) -> Any:
            info = await self._stream(js)
            kv = await _bucket(js, self.config.stream, create=True)
            record, revision = await _get(kv, self.key)
            if revision is None:  # the first batch: later scans start at today's end
                record = {
                    "sink": self.ctx.app_id,
                    "writer": self.ctx.writer or None,
                    "version": None,
                    "places": {},
                    "seq": info.state.last_seq,
                }
                revision = await kv.create(self.key, json.dumps(record).encode())
            elif self.ctx.claim(record.get("writer"), f"stream {self.config.stream}"):
                record = {**record, "writer": self.ctx.writer}
                revision = await kv.update(self.key, json.dumps(record).encode(), last=revision)
            version = record.get("version")
            if version is not None and int(version) >= batch_id:
                return None
            sent = await _published(
                js,
                self.config.stream,
                self.config.subject,
                int(record.get("seq") or 0) + 1,
                self.id_prefix(record),
            )
            return (record, revision), sent

        begun: tuple[tuple[dict[str, Any], int], set[str]] | None = self._call(
            "cannot prepare the batch", work
        )
        return begun

    async def _stream(self, js: Any) -> Any:
        from nats.js.api import StreamConfig
        from nats.js.errors import NotFoundError

        cfg = self.config
        try:
            info = await js.stream_info(cfg.stream)
        except NotFoundError:
            if not cfg.auto_create_stream:
                raise self.fail(
                    "does not exist and auto_create_stream is false: create it first (or let "
                    "rivc create it)"
                ) from None
            return await js.add_stream(StreamConfig(name=cfg.stream, subjects=[cfg.subject]))
        subjects = info.config.subjects or []
        if not any(subject_matches(s, cfg.subject) for s in subjects):
            raise self.fail(
                f"takes subjects {', '.join(subjects) or '(none)'}, not {cfg.subject}: add the "
                "subject to the stream, or publish to one of its subjects"
            )
        return info

    def _finish(
        self, batch_id: int, begun: tuple[dict[str, Any], int], rows: int, size: int
    ) -> WriteResult:
        fault("before-commit", self.config.stream)  # published; the commit not made
        record, revision = begun

        async def work(_nc: Any, js: Any) -> bool:
            kv = await _bucket(js, self.config.stream, create=True)
            return await self._commit(js, kv, record, revision, batch_id)

        import time

        started = time.perf_counter()
        committed = self._call(f"batch {batch_id} was not committed", work)
        elapsed = time.perf_counter() - started
        if not committed:  # another writer committed it meanwhile
            return WriteResult()
        return WriteResult(rows=rows, bytes=size, commits=1, commit_s=elapsed)

    async def _commit(
        self, js: Any, kv: Any, record: dict[str, Any], revision: int | None, batch_id: int
    ) -> bool:
        """The batch id, its places and the stream's end, if the key is as the batch found it."""
        from nats.js.errors import KeyWrongLastSequenceError

        info = await js.stream_info(self.config.stream)
        places = {**record.get("places", {})}
        places.update({self.ctx.place_id(k): v for k, v in self.ctx.places.items()})
        new = {
            **record,
            "sink": self.ctx.app_id,
            "version": batch_id,
            "commits": int(record.get("commits") or 0) + 1,
            "places": places,
            "seq": info.state.last_seq,
        }
        if not new.get("writer") and self.ctx.writer:
            new["writer"] = self.ctx.writer
        body = json.dumps(new).encode()
        try:
            if revision is None:
                await kv.create(self.key, body)
            else:
                await kv.update(self.key, body, last=revision)
        except KeyWrongLastSequenceError:
            held, _ = await _get(kv, self.key)
            if held.get("version") is not None and int(held["version"]) >= batch_id:
                return False
            raise self.fail(
                f"batch {batch_id}: another writer committed to this sink's key meanwhile"
            ) from None
        return True


async def _bucket(js: Any, stream_name: str, create: bool) -> Any:
    from nats.js.api import KeyValueConfig
    from nats.js.errors import BucketNotFoundError, NotFoundError

    try:
        return await js.key_value(BUCKET + stream_name)
    except (BucketNotFoundError, NotFoundError):
        if not create:
            return None
        return await js.create_key_value(KeyValueConfig(bucket=BUCKET + stream_name, history=1))


async def _get(kv: Any, key: str) -> tuple[dict[str, Any], int | None]:
    from nats.js.errors import KeyNotFoundError

    try:
        entry = await kv.get(key)
    except KeyNotFoundError:
        return {}, None
    if entry.value is None:  # deleted
        return {}, None
    found: dict[str, Any] = json.loads(entry.value)
    return found, int(entry.revision)


async def _published(js: Any, stream_name: str, subject: str, start: int, prefix: str) -> set[str]:
    """The message ids starting with `prefix` among the stream's messages on `subject` from
    sequence `start` on (headers only)."""
    from nats.js.api import ConsumerConfig, DeliverPolicy

    info = await js.stream_info(stream_name)
    if info.state.last_seq < start:
        return set()
    sub = await js.subscribe(
        subject,
        stream=stream_name,
        ordered_consumer=True,
        config=ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=max(start, info.state.first_seq),
            headers_only=True,
        ),
    )
    found: set[str] = set()
    try:
        consumer = await sub.consumer_info()  # delivered ones are no longer pending
        while consumer.num_pending or consumer.delivered.consumer_seq:
            try:
                msg = await sub.next_msg(timeout=SCAN_WAIT_S)
            except TimeoutError:  # nothing on the subject after `start`
                break
            mid = (msg.headers or {}).get("Nats-Msg-Id", "")
            if mid.startswith(prefix):
                found.add(mid)
            if msg.metadata.num_pending == 0 or msg.metadata.sequence.stream >= info.state.last_seq:
                break
    finally:
        await sub.unsubscribe()
    return found


def _encode_task(
    encode: Encoder,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow's function: each row as its payload."""

    def go(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for batch in batches:
            yield pa.RecordBatch.from_pydict(
                {"payload": encode(batch)}, schema=pa.schema([("payload", pa.binary())])
            )

    return go


def _publish_task(
    params: dict[str, Any], subject: str, stream_name: str, prefix: str, sent: frozenset[str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow's function: a task publishes its rows and yields (rows, bytes)."""

    def messages(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, bytes]]:
        for batch in batches:
            payload = batch.column(0).to_pylist()
            h, n = batch.column(1).to_pylist(), batch.column(2).to_pylist()
            for i in range(batch.num_rows):
                yield f"{prefix}{h[i][:32]}-{n[i]}", payload[i]

    def go(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        rows, size = run(_publish(params, subject, stream_name, messages(batches), sent))
        yield pa.RecordBatch.from_pydict({"rows": [rows], "bytes": [size]})

    return go


async def _publish(
    params: dict[str, Any],
    subject: str,
    stream_name: str,
    messages: Iterable[tuple[str, bytes]],
    sent: frozenset[str],
    in_process: bool = False,
) -> tuple[int, int]:
    """Publish each message not in `sent`, awaiting the server's acknowledgements; returns
    (messages the stream took, bytes)."""
    from nats.js.errors import APIError

    nc = await connect(params)
    js = nc.jetstream(publish_async_max_pending=IN_FLIGHT * 2)
    rows = size = 0
    pending: list[Any] = []
    flushed = False

    async def settle() -> int:
        try:
            acks = await asyncio.gather(*pending)
        except APIError as exc:
            raise RuntimeError(f"{REFUSED} {one_line(exc)}") from None
        pending.clear()
        return sum(1 for a in acks if not a.duplicate)

    try:
        for mid, payload in messages:
            if mid in sent:
                continue
            if len(payload) > nc.max_payload:
                raise RuntimeError(
                    f"{REFUSED} a row of {len(payload)} bytes is larger than the server's "
                    f"max_payload ({nc.max_payload} bytes)"
                )
            headers = {"Nats-Msg-Id": mid}
            future = await js.publish_async(subject, payload, stream=stream_name, headers=headers)
            pending.append(future)
            size += len(payload)
            if len(pending) >= IN_FLIGHT:
                rows += await settle()
                if in_process and not flushed:
                    flushed = True
                    fault("mid-publish", stream_name)  # part of the batch is in the stream
        rows += await settle()
    finally:
        await nc.close()
    return rows, size


def durable_name(cfg: Any, project: str, name: str) -> str:
    """The source's durable consumer: its config's, else rivc-<project>-<source>-<table>."""
    source, _, table = name.partition(".")
    return cfg.durable or re.sub(r"[^A-Za-z0-9_-]", "_", f"rivc-{project}-{source}-{table}")


def lag(cfg: Any, project: str, name: str) -> int | None:
    """Messages of the stream the durable consumer has not had acknowledged: not yet in the
    sink. None when the consumer does not exist yet."""
    from nats.js.errors import NotFoundError

    async def go() -> int | None:
        nc = await connect({**server_params(cfg), "max_reconnect_attempts": 0})
        try:
            info = await nc.jetstream().consumer_info(cfg.stream, durable_name(cfg, project, name))
            return int(info.num_pending or 0) + int(info.num_ack_pending or 0)
        except NotFoundError:
            return None
        finally:
            await nc.close()

    found: int | None = run(go())
    return found


def probe(cfg: NatsServer, _root: Any, _storage: Any) -> tuple[bool, str]:
    """Connect and read the stream's info."""
    from nats.js.errors import NotFoundError

    where = mask_url(cfg.url.split(",")[0].strip())

    async def go() -> tuple[bool, str]:
        nc = await connect({**server_params(cfg), "max_reconnect_attempts": 0})
        try:
            info = await nc.jetstream().stream_info(cfg.stream)
            return True, f"{where} stream {cfg.stream}: {info.state.messages} messages"
        except NotFoundError:
            return True, f"{where} (stream {cfg.stream} does not exist yet)"
        finally:
            await nc.close()

    try:
        result: tuple[bool, str] = run(go())
        return result
    except Exception as exc:  # noqa: BLE001  (any failure to reach the server is the answer)
        return False, f"connectivity error: {where}: {one_line(exc)}"
