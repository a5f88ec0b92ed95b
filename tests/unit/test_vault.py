"""`${vault:PATH#FIELD}` in profiles.yml, against a local stub of Vault's KV HTTP API (versions 1
and 2 as Vault serves them: the token header, data.data and metadata): this tests the provider's
contract, not a Vault server (none installs here)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rivc.compiler.loading.project import load_project

TOKEN = "hvs.test-token"
PASSWORD = "v4ult-pw-7d1c"  # what no file or line may hold
SECRETS = {
    "/v1/secret/data/pg": {  # KV version 2
        "data": {"data": {"password": PASSWORD, "user": "shop"}, "metadata": {"version": 3}}
    },
    "/v1/kv/pg": {"data": {"user": "shop_v1", "port": 5432}},  # KV version 1
}


class Vault(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append(dict(self.headers))
        if self.headers.get("X-Vault-Token") != TOKEN:
            self._answer(403, {"errors": ["permission denied"]})
        elif self.path in SECRETS:
            self._answer(200, SECRETS[self.path])
        else:
            self._answer(404, {"errors": []})

    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def vault() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Vault)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


PROFILE = """
default:
  connections:
    db: {type: postgres, host: 127.0.0.1, database: shop,
         user: "${vault:kv/pg#user}",
         password: "${vault:secret/data/pg#password}"}
"""


def test_a_profile_reads_its_secrets_from_vault(make_project, vault, tmp_path):
    root = make_project({"profiles.yml": PROFILE})
    env = {"VAULT_ADDR": vault, "VAULT_TOKEN": TOKEN, "VAULT_NAMESPACE": "team-a"}
    db = load_project(root, env=env).profile.connections["db"]
    assert (db.user, db.password) == ("shop_v1", PASSWORD)
    assert Vault.seen[-1]["X-Vault-Namespace"] == "team-a"

    # the token the Vault CLI's login leaves, when VAULT_TOKEN is unset
    (tmp_path / "home").mkdir()
    (tmp_path / "home/.vault-token").write_text(TOKEN + "\n")
    db = load_project(root, env={"VAULT_ADDR": vault, "HOME": str(tmp_path / "home")})
    assert db.profile.connections["db"].password == PASSWORD


def compile_in_own_process(root, env):
    """`rivc compile` anew (a project compiled before is up to date without reading its profile:
    the secrets' values make no part of what compile writes)."""
    shutil.rmtree(root / "target", ignore_errors=True)
    code = "import sys; from rivc.adapters.cli import main; main(sys.argv[1:])"
    return subprocess.run(
        [sys.executable, "-c", code, "compile", "--project-dir", str(root)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_vault_from_dotenv_and_each_failure_named_at_its_line(make_project, vault):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VAULT_")}
    root = make_project(
        {"profiles.yml": PROFILE, ".env": f"VAULT_ADDR={vault}\nVAULT_TOKEN={TOKEN}\n"}
    )
    done = compile_in_own_process(root, clean)
    assert done.returncode == 0, done.stdout + done.stderr
    for path in root.rglob("*"):  # the secret is in no file compile wrote, nor on the console
        if path.is_file() and ".env" not in path.name:
            assert PASSWORD.encode() not in path.read_bytes(), path
    assert PASSWORD not in done.stdout + done.stderr

    cases = {
        f"VAULT_ADDR={vault}\nVAULT_TOKEN=wrong\n": f"403 for {vault}/v1/kv/pg: permission denied",
        f"VAULT_TOKEN={TOKEN}\n": "VAULT_ADDR is not set",
        f"VAULT_ADDR=http://127.0.0.1:{closed_port()}\nVAULT_TOKEN={TOKEN}\n": "cannot reach Vault",
    }
    for dotenv, reason in cases.items():
        (root / ".env").write_text(dotenv)
        done = compile_in_own_process(root, {**clean, "HOME": str(root)})
        assert done.returncode == 2, done.stdout + done.stderr
        assert "profiles.yml:4:" in done.stderr and reason in done.stderr, done.stderr
        assert "Traceback" not in done.stderr

    (root / ".env").write_text(f"VAULT_ADDR={vault}\nVAULT_TOKEN={TOKEN}\n")
    (root / "profiles.yml").write_text(PROFILE.lstrip().replace("#password", "#pasword"))
    done = compile_in_own_process(root, clean)
    assert done.returncode == 2 and "profiles.yml:5:" in done.stderr, done.stderr
    assert "no field 'pasword' (fields: password, user)" in done.stderr
    assert PASSWORD not in done.stderr
    (root / "profiles.yml").write_text(
        PROFILE.lstrip().replace("secret/data/pg#password", "secret/data/pg")
    )
    done = compile_in_own_process(root, clean)
    assert done.returncode == 2 and "expected ${vault:PATH#FIELD}" in done.stderr, done.stderr
