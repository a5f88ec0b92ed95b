"""The webhook sink against a local HTTP receiver: rows exact as JSON, a key per request that
retries and reruns send unchanged, retries on 503 and 429, a refusal named with the status and
the receiver's words, kills mid-send and before the commit, a lost `.rivc/`."""

from __future__ import annotations

import json
import shutil
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from rivc_dbs import database, project

from rivc_testing import rivc, run_rivc, write_files

pytestmark = pytest.mark.integration


class Receiver:
    """Records every request; answers 503 or 429 to the first `busy` requests and 400 to a body
    holding `refuse`."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.busy = 0
        self.refuse: str | None = None
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    if receiver.busy:
                        receiver.busy -= 1
                        self.send_response(503 if receiver.busy % 2 else 429)
                        self.send_header("Retry-After", "0")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    if receiver.refuse and receiver.refuse in body.decode():
                        answer = b'{"error": "amount must be positive"}'
                        self.send_response(400)
                        self.send_header("Content-Length", str(len(answer)))
                        self.end_headers()
                        self.wfile.write(answer)
                        return
                    receiver.requests.append(
                        (
                            self.path,
                            self.headers["Idempotency-Key"],
                            dict(self.headers),
                            json.loads(body),
                        )
                    )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def rows(self, path: str) -> list[Any]:
        """Every row the receiver took on `path`, once per key (as an endpoint that honours
        the key keeps them)."""
        seen: dict[str, Any] = {}
        for p, key, _, body in self.requests:
            if p == path:
                seen.setdefault(key, body)
        return [r for body in seen.values() for r in (body if isinstance(body, list) else [body])]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


def test_webhook_rows_exact_with_stable_keys_retries_and_a_rerun_sends_nothing(
    spark, tmp_path, receiver, monkeypatch
):
    monkeypatch.setenv("HOOK_TOKEN", "s3cr3t-token")
    root = write_files(
        tmp_path / "w",
        {
            "rivc_project.yml": "name: hooks\n",
            "models/edges.sql": "{{ config(materialized='table') }}\n"
            "select * from values (1, 1.50bd, cast('NaN' as double), map('k', 1), X'00ff'),\n"
            "  (2, -0.000000000000000001bd, 2.5d, map(), X''), (2, -0.000000000000000001bd,"
            " 2.5d, map(), X''), (3, null, null, null, null) as t(id, dec, dbl, m, bin)",
            "sinks/hooks.yml": f"""
sinks:
  - {{name: one_by_one, from: edges, connector: webhook,
     config: {{url: "{receiver.url}/one", headers: {{X-Source: rivc}},
               headers_env: {{Authorization: "Bearer {{HOOK_TOKEN}}"}}, initial_backoff_ms: 10}}}}
  - {{name: in_arrays, from: edges, connector: webhook,
     config: {{url: "{receiver.url}/arrays", batch_size: 3, max_in_flight: 1, id_field: _key}}}}
""",
        },
    )
    receiver.busy = 4  # 503, 429, 503, 429: each retried
    done = rivc(root, "run")
    assert done.exit_code == 0, done.output
    assert "s3cr3t" not in done.output
    want = [
        {"id": 1, "dec": "1.500000000000000000", "dbl": "NaN", "m": {"k": 1}, "bin": "00ff"},
        {"id": 2, "dec": "-0.000000000000000001", "dbl": 2.5, "m": {}, "bin": ""},
        {"id": 2, "dec": "-0.000000000000000001", "dbl": 2.5, "m": {}, "bin": ""},
        {"id": 3, "dec": None, "dbl": None, "m": None, "bin": None},
    ]
    key = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
    in_arrays = receiver.rows("/arrays")
    ids = [r.pop("_key") for r in in_arrays]  # each row's own idempotency key, in the row
    assert len(set(ids)) == 4 and all(i.count("-") == 3 for i in ids)
    for path, got in (("/one", receiver.rows("/one")), ("/arrays", in_arrays)):
        assert sorted(got, key=key) == sorted(want, key=key), path
    one = [r for r in receiver.requests if r[0] == "/one"]
    assert len(one) == 4 and len({k for _, k, _, _ in one}) == 4  # the two equal rows: two keys
    assert all(
        h["Authorization"] == "Bearer s3cr3t-token" and h["X-Source"] == "rivc"
        for _, _, h, _ in one
    )
    arrays = [r for r in receiver.requests if r[0] == "/arrays"]
    assert [len(b) for _, _, _, b in arrays] == [3, 1]

    count = len(receiver.requests)
    again = rivc(root, "run")
    assert again.exit_code == 0, again.output
    assert len(receiver.requests) == count  # the commit in the warehouse holds the batch

    shutil.rmtree(root / ".rivc")  # the record lost: the commits are in the warehouse
    third = rivc(root, "run")
    assert third.exit_code == 0, third.output
    assert len(receiver.requests) == count


def test_webhook_kills_and_a_refusal_lose_and_double_nothing(tmp_path, receiver):
    """A landed source sent from rivc's process (no JVM): killed with half its requests
    answered, then before the commit; a row the receiver refuses stops the sink by name and is
    sent again once fixed. Each row once by key, and no request sent twice but those in flight
    at a kill."""
    with database("postgres") as db:
        db.execute(
            "CREATE TABLE orders (id int PRIMARY KEY, amount numeric(12,2), updated_at timestamp)"
        )
        db.execute(
            "INSERT INTO orders SELECT i, i * 1.25, timestamp '2026-01-01' + i * interval '1 s' "
            "FROM generate_series(1, 3000) i"
        )
        sinks = f"""
sinks:
  - {{name: hook, from: source:src.orders, connector: webhook,
     config: {{url: "{receiver.url}/orders", batch_size: 10, initial_backoff_ms: 10}}}}
"""
        tables = (
            "- {name: orders, table: orders, mode: incremental, cursor_column: updated_at, "
            "unique_key: id}"
        )
        root = project(tmp_path, db, tables, {}, sinks)

        killed = run_rivc(root, "mid-publish:hook")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        half = len(receiver.requests)
        assert 0 < half < 300
        killed = run_rivc(root, "before-commit:hook")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert len(receiver.requests) == 300  # the first run's answered requests not resent
        done = run_rivc(root)
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(receiver.requests) == 300  # all answered: the commit was all that was left
        ids = Counter(r["id"] for r in receiver.rows("/orders"))
        assert ids == Counter(range(1, 3001))

        db.execute("INSERT INTO orders VALUES (3001, -1, '2026-02-01'), (3002, 2, '2026-02-01')")
        receiver.refuse = '"id": 3001'
        refused = run_rivc(root)
        assert refused.returncode == 1
        assert (  # a webhook's path may be its secret (Slack's): never printed
            f"sink hook: {receiver.url}/**** refused a request (400): "
            '{"error": "amount must be positive"}' in refused.stdout
        ), refused.stdout
        receiver.refuse = None
        done = run_rivc(root)
        assert done.returncode == 0, done.stdout + done.stderr
        rows = receiver.rows("/orders")
        assert Counter(r["id"] for r in rows) == Counter(range(1, 3003))
        assert len(receiver.requests) == 301
