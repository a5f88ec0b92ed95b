"""The `webhook` sink: rows as JSON to an HTTP endpoint, at least once, each request with an
`Idempotency-Key` that every retry and every rerun sends unchanged.

An endpoint keeps nothing rivc can read, so the sink's commits and the keys answered so far are
in the warehouse (sentlog.py). Rows go out in the order of their ids, `batch_size` to a request,
so the same batch makes the same requests; a request's key is its single row's id, or a digest
of its rows' ids.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rivc.compiler.errors import ConnectorError
from rivc.compiler.loading.secrets import from_env

from ...plane.base import WriteResult
from ...util.faults import armed, fault
from ..sentlog import LoggedSink, Progress
from .spec import WebhookSinkConfig

if TYPE_CHECKING:
    import pyarrow.dataset as pads

RETRIED = {408, 425, 429, 500, 502, 503, 504}


class WebhookSink(LoggedSink[WebhookSinkConfig]):
    # ------------------------------------------------------------------ a batch

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        if self.config.id_field in data.schema.names:
            raise ConnectorError(
                f"sink {self.ctx.sink}: id_field {self.config.id_field!r} is a column of its "
                "input: name another field, or drop the column"
            )
        begun = self.begin(data, batch_id, f"webhook {self.config.url}")
        if begun is None:
            return WriteResult()
        record, rows, progress = begun
        size, field = self.config.batch_size, self.config.id_field
        if field is not None:
            rows = [(key, _with_id(payload, field, key)) for key, payload in rows]
        requests = [_request(rows[i : i + size], size > 1) for i in range(0, len(rows), size)]
        todo = [r for r in requests if r[0] not in progress.sent]
        started = time.perf_counter()
        retries = self._send(todo, progress)
        fault("before-commit", self.ctx.sink)  # every request answered; the commit not made
        self.commit(record, batch_id)
        return WriteResult(
            rows=sum(r[2] for r in todo),
            bytes=sum(len(r[1]) for r in todo),
            retries=retries,
            commits=1,
            commit_s=time.perf_counter() - started,
        )

    def _send(self, todo: list[tuple[str, bytes, int]], progress: Progress) -> int:
        """Send every request, `max_in_flight` at once; record the accepted keys as they come.
        Returns the retries made."""
        lock = threading.Lock()
        local = threading.local()
        retries = [0]

        def one(item: tuple[str, bytes, int]) -> None:
            key, body, _ = item
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = _connect(self.config)
            conn, tries = self._post(conn, key, body)
            local.conn = conn
            with lock:
                retries[0] += tries
                progress.sent.add(key)

        with ThreadPoolExecutor(self.config.max_in_flight) as pool:
            pending: set[Future[None]] = set()
            for i, item in enumerate(todo):
                pending.add(pool.submit(one, item))
                if len(pending) >= self.config.max_in_flight * 2:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    self._raise(done, pending)
                    with lock:
                        progress.save(now=False)
                if i == len(todo) // 2 and i and armed("mid-publish", self.ctx.sink):
                    done, pending = wait(pending)
                    self._raise(done, pending)
                    with lock:
                        progress.save()
                    fault("mid-publish", self.ctx.sink)  # half of the requests answered
            done, _ = wait(pending)
            self._raise(done, set())
        progress.save()
        return retries[0]

    @staticmethod
    def _raise(done: set[Future[None]], pending: set[Future[None]]) -> None:
        for f in done:
            exc = f.exception()
            if exc is not None:
                for p in pending:
                    p.cancel()
                raise exc

    def _post(self, conn: Any, key: str, body: bytes) -> tuple[Any, int]:
        """One request, retried on 408, 429, 5xx and lost connections with a doubling backoff
        (a 429's or 503's Retry-After when longer); (the connection, retries made)."""
        cfg = self.config
        url = urlsplit(cfg.url)
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        headers = {
            "Content-Type": "application/json",
            **cfg.headers,
            **{h: from_env(v, os.environ) for h, v in cfg.headers_env.items()},
            "Idempotency-Key": key,
        }
        delay = cfg.initial_backoff_ms / 1000
        for attempt in range(1, cfg.max_attempts + 1):
            status, wait_s, text = 0, 0.0, ""
            try:
                conn.request(cfg.method, path, body=body, headers=headers)
                answer = conn.getresponse()
                text = answer.read(2048).decode("utf-8", errors="replace")
                answer.read()
                status = answer.status
                if 200 <= status < 300:
                    return conn, attempt - 1
                wait_s = _retry_after(answer.getheader("Retry-After"))
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                conn = _connect(cfg)
                text = f"{type(exc).__name__}: {exc}"
            if status and status not in RETRIED:
                raise ConnectorError(
                    f"sink {self.ctx.sink}: {cfg.url} refused a request ({status}): "
                    + " ".join(text.split())[:200]
                )
            if attempt == cfg.max_attempts:
                what = f"HTTP {status}" if status else text
                raise ConnectorError(
                    f"sink {self.ctx.sink}: {cfg.url}: {what} after {attempt} attempts"
                )
            time.sleep(max(delay, wait_s))
            delay = min(delay * 2 or 0.1, cfg.max_backoff_ms / 1000)
        raise AssertionError("unreachable")


def _with_id(payload: bytes, field: str, key: str) -> bytes:
    """The row's JSON object with its id under `field`, first."""
    body = b"{" + json.dumps(field).encode() + b": " + json.dumps(key).encode()
    return body + (b", " + payload[1:] if payload != b"{}" else b"}")


def _request(rows: list[tuple[str, bytes]], array: bool) -> tuple[str, bytes, int]:
    """(key, body, rows) of one request."""
    if not array:
        key, payload = rows[0]
        return key, payload, 1
    digest = hashlib.sha256("\n".join(k for k, _ in rows).encode()).hexdigest()[:32]
    key = rows[0][0].rsplit("-", 2)[0] + f"-r{digest}"
    return key, b"[" + b",".join(p for _, p in rows) + b"]", len(rows)


def _connect(cfg: WebhookSinkConfig) -> Any:
    url = urlsplit(cfg.url)
    if url.scheme == "https":
        return http.client.HTTPSConnection(url.netloc, timeout=cfg.timeout_s)
    return http.client.HTTPConnection(url.netloc, timeout=cfg.timeout_s)


def _retry_after(value: str | None) -> float:
    try:
        return min(float(value), 300.0) if value else 0.0
    except ValueError:  # an HTTP date: wait the backoff
        return 0.0
