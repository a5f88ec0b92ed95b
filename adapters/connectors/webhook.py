"""The `webhook` sink: rows as JSON to an HTTP endpoint, at least once, each request with an
`Idempotency-Key` that every retry and every rerun sends unchanged.

An HTTP endpoint keeps no record rivc can read, so the sink's commits live in the warehouse,
beside the checkpoints: `<warehouse>/_rivc_webhooks/<sink>/commit.json` (the batch id, the
places of its inputs, the number of commits, the writer), written after the endpoint answered
2xx to every request of the batch. While a batch is sent, `sent.json` records the keys the
endpoint accepted (rewritten at most once a second), so a rerun after a kill sends only the
rest, and again only the requests that were in flight or answered since the last record, with
the same keys: an endpoint that honours the key takes each row once.

A row's id is `<sink>-<commits>-<sha256 of the row's JSON>-<k>` (k numbers equal rows), as in
the nats sink; rows are sent in the order of their ids, `batch_size` to a request, so the same
batch makes the same requests however Spark computed it. A request's key is its single row's id,
or a digest of its rows' ids.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rivc.compiler.connector_specs import WebhookSinkConfig
from rivc.compiler.errors import ConnectorError

from ..plane.base import Sink, WriteResult, stream
from ..util.faults import fault
from ..util.storage import Store, join
from .files_formats import json_objects

if TYPE_CHECKING:
    import pyarrow.dataset as pads

AREA = "_rivc_webhooks"  # under the warehouse
RECORD_EVERY_S = 1.0  # sent.json is rewritten at most this often
RETRIED = {408, 425, 429, 500, 502, 503, 504}


class WebhookSink(Sink):
    config: WebhookSinkConfig

    # ------------------------------------------------------------------ its commits

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

    def places(self, inputs: Any) -> dict[str, int | None]:
        held = self._read("commit.json").get("places", {})
        return {i: held.get(self.ctx.place_id(i)) for i in inputs}

    def writer(self) -> str | None:
        found = self._read("commit.json").get("writer")
        return None if found is None else str(found)

    def record_places(self, batch_id: int) -> None:
        self._commit(self._read("commit.json"), batch_id)

    def _commit(self, record: dict[str, Any], batch_id: int) -> None:
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

    # ------------------------------------------------------------------ a batch

    def write(self, data: pads.Dataset, batch_id: int) -> WriteResult:
        record = self._read("commit.json")
        self.ctx.claim(record.get("writer"), f"webhook {self.config.url}")
        version = record.get("version")
        if version is not None and int(version) >= batch_id:
            return WriteResult()
        commits = int(record.get("commits") or 0)
        progress = self._read("sent.json")
        sent = set(progress.get("keys", [])) if progress.get("commits") == commits else set()
        prefix = hashlib.sha1(self.ctx.app_id.encode()).hexdigest()[:12]
        rows: list[tuple[str, bytes]] = []
        counts: Counter[str] = Counter()
        for batch in stream(data):
            for text in json_objects(batch):
                payload = text.encode()
                h = hashlib.sha256(payload).hexdigest()
                counts[h] += 1
                rows.append((f"{prefix}-{commits}-{h[:32]}-{counts[h]}", payload))
        rows.sort()
        size = self.config.batch_size
        requests = [_request(rows[i : i + size], size > 1) for i in range(0, len(rows), size)]
        todo = [r for r in requests if r[0] not in sent]
        started = time.perf_counter()
        retries = self._send(todo, sent, commits)
        fault("before-commit", self.ctx.sink)  # every request answered; the commit not made
        self._commit(record, batch_id)
        return WriteResult(
            rows=sum(r[2] for r in todo),
            bytes=sum(len(r[1]) for r in todo),
            retries=retries,
            commits=1,
            commit_s=time.perf_counter() - started,
        )

    def _send(self, todo: list[tuple[str, bytes, int]], sent: set[str], commits: int) -> int:
        """Send every request, `max_in_flight` at once; record the accepted keys as they come.
        Returns the retries made."""
        lock = threading.Lock()
        local = threading.local()
        retries = [0]
        last = [time.monotonic()]
        record = _Recorder(self, sent, commits)

        def one(item: tuple[str, bytes, int]) -> None:
            key, body, _ = item
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = _connect(self.config)
            conn, tries = self._post(conn, key, body)
            local.conn = conn
            with lock:
                retries[0] += tries
                sent.add(key)

        with ThreadPoolExecutor(self.config.max_in_flight) as pool:
            pending: set[Future[None]] = set()
            for i, item in enumerate(todo):
                pending.add(pool.submit(one, item))
                if len(pending) >= self.config.max_in_flight * 2:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    self._raise(done, pending)
                    if time.monotonic() - last[0] >= RECORD_EVERY_S:
                        with lock:
                            record.save()
                        last[0] = time.monotonic()
                if i == len(todo) // 2 and i:
                    done, pending = wait(pending)
                    self._raise(done, pending)
                    with lock:
                        record.save()
                    fault("mid-publish", self.ctx.sink)  # half of the requests answered
            done, _ = wait(pending)
            self._raise(done, set())
        record.save()
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
            **{h: os.environ.get(v, "") for h, v in cfg.headers_env.items()},
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


class _Recorder:
    """sent.json: the keys the endpoint accepted in this commit's batch."""

    def __init__(self, sink: WebhookSink, sent: set[str], commits: int) -> None:
        self.sink, self.sent, self.commits = sink, sent, commits

    def save(self) -> None:
        self.sink._write("sent.json", {"commits": self.commits, "keys": sorted(self.sent)})


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
