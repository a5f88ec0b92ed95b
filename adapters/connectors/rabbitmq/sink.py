"""The `rabbitmq` sink: each row a persistent message to an exchange (a JSON object, or the
`payload:` format: rivc.adapters.plane.payloads), at least once.

Every message is published mandatory with publisher confirms, `max_in_flight` awaiting their
confirm at once: a message the broker cannot route (no queue bound for its routing key) or
refuses (a nack) stops the sink by name, and the batch is committed only when every message was
confirmed. A queue is consumed by others, so nothing can be read back: the commits and the ids
confirmed so far are in the warehouse (sentlog.py), and each message carries its row's id as its
AMQP `message_id`, the same on every rerun, for consumers to deduplicate by.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

from rivc.compiler.errors import ConnectorError

from ...plane.base import WriteResult
from ...util.faults import armed, fault
from ..payloads import CONTENT_TYPES, encoder
from ..sentlog import LoggedSink, Progress
from .spec import RabbitmqSinkConfig

if TYPE_CHECKING:
    import pyarrow.dataset as pads


class RabbitmqSink(LoggedSink[RabbitmqSinkConfig]):
    def where_to(self) -> str:
        """The target as the messages name it (never the password)."""
        parts = urlsplit(self.config.url)
        host = parts.netloc.rsplit("@", 1)[-1]
        exchange = self.config.exchange or "(default exchange)"
        return f"rabbitmq {host} {exchange} {self.config.routing_key}"

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        encode = encoder(self.config.payload, self.ctx.root, self.ctx.sink)
        begun = self.begin(data, batch_id, self.where_to(), encode)
        if begun is None:
            return WriteResult()
        record, rows, progress = begun
        todo = [r for r in rows if r[0] not in progress.sent]
        started = time.perf_counter()
        try:
            asyncio.run(self._publish(todo, progress))
        except ConnectorError:
            raise
        except Exception as exc:  # aio-pika's and the socket's errors
            text = " ".join(str(exc).split())[:300] or type(exc).__name__
            raise ConnectorError(f"sink {self.ctx.sink}: {self.where_to()}: {text}") from exc
        fault("before-commit", self.ctx.sink)  # every message confirmed; the commit not made
        self.commit(record, batch_id)
        return WriteResult(
            rows=len(todo),
            bytes=sum(len(p) for _, p in todo),
            commits=1,
            commit_s=time.perf_counter() - started,
        )

    async def _publish(self, todo: list[tuple[str, bytes]], progress: Progress) -> None:
        import aio_pika
        from aio_pika.exceptions import DeliveryError, PublishError

        cfg = self.config
        conn = await aio_pika.connect(url_with_password(cfg.url, cfg.password_env), timeout=10)
        try:
            channel = await conn.channel(publisher_confirms=True, on_return_raises=True)
            exchange = (
                await channel.get_exchange(cfg.exchange)
                if cfg.exchange
                else channel.default_exchange
            )
            if cfg.queue:
                queue = await channel.declare_queue(cfg.queue, durable=True)
                if cfg.exchange:
                    await queue.bind(exchange, routing_key=cfg.routing_key)
            window: list[tuple[str, Any]] = []

            async def settle() -> None:
                results = await asyncio.gather(*(f for _, f in window), return_exceptions=True)
                for (mid, _), result in zip(window, results, strict=True):
                    if isinstance(result, PublishError | DeliveryError):
                        raise ConnectorError(
                            f"sink {self.ctx.sink}: {self.where_to()}: the broker did not take "
                            f"message {mid}: {_why(result)}"
                        )
                    if isinstance(result, BaseException):
                        raise result
                    progress.sent.add(mid)
                window.clear()
                progress.save(now=False)

            half = len(todo) // 2
            for i, (mid, payload) in enumerate(todo):
                message = aio_pika.Message(
                    payload,
                    content_type=CONTENT_TYPES[cfg.payload.format],
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    message_id=mid,
                )
                window.append((mid, exchange.publish(message, cfg.routing_key, mandatory=True)))
                if len(window) >= cfg.max_in_flight:
                    await settle()
                if i == half and half and armed("mid-publish", self.ctx.sink):
                    await settle()
                    progress.save()
                    fault("mid-publish", self.ctx.sink)  # half of the messages confirmed
            await settle()
            progress.save()
        finally:
            await conn.close()


def url_with_password(url: str, password_env: str | None) -> str:
    """`url` with the password from the variable `password_env`, if one is named."""
    if not password_env:
        return url
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    user = quote(parts.username or "guest", safe="")
    password = quote(os.environ.get(password_env, ""), safe="")
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def lag(cfg: Any, _project: str, _name: str) -> int | None:
    """Messages ready in the source's queue: not yet taken for the sink (the ones a batch holds
    unacknowledged are not counted)."""
    import pika

    params = pika.URLParameters(url_with_password(cfg.url, cfg.password_env))
    conn = pika.BlockingConnection(params)
    try:
        return int(conn.channel().queue_declare(cfg.queue, passive=True).method.message_count)
    finally:
        conn.close()


def probe(cfg: Any, _root: Any, _storage: Any) -> tuple[bool, str]:
    """Connect and log in; a source's queue and a sink's exchange must exist (a sink's `queue:`
    is declared when it first publishes)."""
    import pika
    from pika.exceptions import ChannelClosedByBroker, ProbableAuthenticationError

    host = urlsplit(cfg.url).netloc.rsplit("@", 1)[-1]
    params = pika.URLParameters(url_with_password(cfg.url, cfg.password_env))
    params.socket_timeout = params.blocked_connection_timeout = 5
    params.connection_attempts = 1
    try:
        conn = pika.BlockingConnection(params)
    except ProbableAuthenticationError as exc:
        return False, f"auth error: {host}: {' '.join(str(exc).split())[:200]}"
    except Exception as exc:  # noqa: BLE001  (any failure to reach the broker is the answer)
        return False, f"connectivity error: {host}: {type(exc).__name__} {exc}".strip()
    try:
        channel = conn.channel()
        source_queue = None if isinstance(cfg, RabbitmqSinkConfig) else cfg.queue
        if source_queue:
            ready = channel.queue_declare(source_queue, passive=True).method.message_count
            return True, f"{host} queue {source_queue}: {ready} ready"
        if cfg.exchange:
            channel.exchange_declare(cfg.exchange, passive=True)
        return True, f"{host} exchange {cfg.exchange or '(default)'}"
    except ChannelClosedByBroker as exc:
        return False, f"not found: {exc.reply_text}"
    finally:
        if conn.is_open:
            conn.close()


def _why(exc: BaseException) -> str:
    """A broker's return (NO_ROUTE) or nack, in its words."""
    delivery = getattr(getattr(exc, "message", None), "delivery", None)
    text = getattr(delivery, "reply_text", None)
    if text == "NO_ROUTE":
        return "no queue is bound for its routing key (declare one, or set queue:)"
    return str(text or exc)
