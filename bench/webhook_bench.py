"""The webhook sink's rate: a table model of N rows (default 20,000) sent by one `rivc run` to a
local HTTP receiver (http.server, threaded, answering 200 at once) with `batch_size` 1 and 100;
beside it the anchor: the same bodies sent by one bare `http.client` keep-alive loop.

    python bench/webhook_bench.py
    python bench/webhook_bench.py --rows 100000
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from extract_bench import measure  # noqa: E402
from sink_bench import MODEL  # noqa: E402


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real endpoint

    def do_POST(self) -> None:  # noqa: N802  (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    rivc = str(Path(sys.executable).parent / "rivc")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "models").mkdir()
        (root / "sinks").mkdir()
        (root / "rivc_project.yml").write_text("name: hookbench\n")
        (root / "models/orders.sql").write_text(MODEL.format(rows=args.rows))
        (root / "sinks/out.yml").write_text(
            "sinks:\n"
            f'  - {{name: one, from: orders, connector: webhook, config: {{url: "{url}/one"}}}}\n'
            f"  - {{name: hundred, from: orders, connector: webhook,\n"
            f'     config: {{url: "{url}/hundred", batch_size: 100}}}}\n'
        )
        wall, _ = measure([rivc, "run"], root)
        print(f"{args.rows:,} rows: whole run {wall:.1f} s")
        results = json.loads((root / "target/run_results.json").read_text())["results"]
        for r in results:
            if r["node"].startswith("sink:"):
                secs = r["duration_s"]
                print(f"  {r['node']:<16} {secs:6.1f} s {args.rows / secs:>10,.0f} rows/s")

        from deltalake import DeltaTable

        from rivc.adapters.connectors.files.formats import json_objects

        table = DeltaTable(str(root / "warehouse/orders")).to_pyarrow_table()
        bodies = [t.encode() for b in table.to_batches() for t in json_objects(b)]
        conn = http.client.HTTPConnection(url.split("://")[1])
        started = time.perf_counter()
        for body in bodies:
            conn.request("POST", "/bare", body=body, headers={"Content-Type": "application/json"})
            conn.getresponse().read()
        secs = time.perf_counter() - started
        print(f"  bare http.client  {secs:6.1f} s {args.rows / secs:>10,.0f} rows/s (one row each)")
    server.shutdown()


if __name__ == "__main__":
    main()
