"""An Iceberg REST catalog's `properties` reach pyiceberg as they are: a local HTTP server in
place of the catalog sees the header a `header.*` property asks for on the catalog's first
request (GET /v1/config)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from rivc.adapters.connectors.iceberg.catalog import open_catalog
from rivc.adapters.connectors.iceberg.spec import IcebergCatalog
from rivc.adapters.util.storage import Store


def test_rest_properties_reach_the_catalogs_requests(tmp_path):
    seen: list[tuple[str, str | None]] = []

    class Catalog(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append((self.path, self.headers.get("X-Rivc-Test")))
            body = json.dumps({"defaults": {}, "overrides": {}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Catalog)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        config = IcebergCatalog(
            type="rest",
            uri=f"http://127.0.0.1:{server.server_port}",
            properties={"header.X-Rivc-Test": "from-properties"},
        )
        open_catalog(config, tmp_path, Store())
    finally:
        server.shutdown()
        server.server_close()
    assert seen and seen[0][0].startswith("/v1/config")
    assert seen[0][1] == "from-properties"
