"""TLS to PostgreSQL: a cluster of the test's own (initdb as the postgres user, another port,
TLS only), read by the COPY reader and by JDBC; the machine's server is left as it was."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from rivc_testing import last_run, rivc, write_files

pytestmark = pytest.mark.integration


def _bin(name: str) -> str:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    found = [v / name for v in versions if (v / name).exists()]
    if not found:
        pytest.skip(f"PostgreSQL's {name} is not installed")
    return str(found[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def tls_cluster() -> Iterator[tuple[int, Path]]:
    if os.geteuid() != 0 or shutil.which("openssl") is None:
        pytest.skip("needs root (to run initdb as postgres) and openssl")
    base = Path(tempfile.mkdtemp(prefix="rivc-tls-", dir="/tmp"))
    certs = base / "certs"
    certs.mkdir()
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=rivc test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        cwd=certs,
    )
    (certs / "san.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        cwd=certs,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.cnf",
        "-out",
        "server.crt",
        cwd=certs,
    )
    data = base / "data"
    port = _free_port()
    shutil.chown(base, "postgres")
    for f in certs.iterdir():
        shutil.chown(f, "postgres")
    (certs / "server.key").chmod(0o600)
    certs.chmod(0o755)
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [*as_pg, _bin("initdb"), "-D", str(data), "-A", "trust"], check=True, capture_output=True
    )
    with open(data / "postgresql.conf", "a") as conf:
        conf.write(
            f"port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{base}'\n"
            f"ssl = on\nssl_cert_file = '{certs / 'server.crt'}'\n"
            f"ssl_key_file = '{certs / 'server.key'}'\n"
        )
    (data / "pg_hba.conf").write_text(
        "hostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n"
    )
    subprocess.run(
        [*as_pg, _bin("pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "start"],
        check=True,
        capture_output=True,
    )
    try:
        yield port, certs / "ca.crt"
    finally:
        subprocess.run(
            [*as_pg, _bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(base, ignore_errors=True)


def _project(root: Path, port: int, tls: str, query: str) -> Path:
    return write_files(
        root,
        {
            "rivc_project.yml": "name: tls\n",
            "profiles.yml": "default:\n  connections:\n    db: {type: postgres, host: "
            f"127.0.0.1, port: {port}, user: postgres, database: postgres, {tls}}}\n",
            "sources/db.yml": "sources:\n  - name: db\n    connector: postgres\n"
            "    connection: db\n    tuning: {profile: fast, max_retries: 0}\n"
            f'    tables:\n      - {{name: t, query: "{query}"}}\n',
            "sinks/out.yml": "sinks:\n  - {name: lake, from: source:db.t, connector: delta, "
            "config: {table_uri: out/t}}\n",
        },
    )


@pytest.mark.parametrize(
    ("reader", "query"),
    [
        ("COPY", "SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 100) g"),
        (
            "JDBC",
            "SELECT g AS id, md5(g::text) AS v, decode('00', 'hex') AS b "
            "FROM generate_series(1, 100) g",
        ),
    ],
)
def test_postgres_over_tls_with_each_reader(spark, tmp_path, tls_cluster, reader, query):
    port, ca = tls_cluster
    root = _project(tmp_path / "ok", port, f"sslmode: verify-full, sslrootcert: '{ca}'", query)
    result = rivc(root, "run")
    assert result.exit_code == 0, result.output
    runs = last_run(root)["results"]
    assert f"via {reader}" in runs[0]["message"], runs[0]
    assert sorted(
        DeltaTable(str(root / "out/t")).to_pyarrow_table().column("id").to_pylist()
    ) == list(range(1, 101))
    # the server takes TLS only: without it the same source fails, naming the server's words
    plain = _project(tmp_path / "plain", port, "sslmode: disable", query)
    assert rivc(plain, "run").exit_code == 1
    error = last_run(plain)["results"][0]["error"]
    assert "no encryption" in error or "pg_hba.conf" in error, error
