"""Throwaway databases on the machine's PostgreSQL and MariaDB, and projects that read them."""

from __future__ import annotations

import secrets
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pymysql

from rivc_testing import write_files


@dataclass(frozen=True)
class Db:
    kind: str  # postgres | mysql
    name: str

    def connect(self) -> Any:
        if self.kind == "postgres":
            return psycopg.connect(
                host="127.0.0.1", user="postgres", dbname=self.name, autocommit=True
            )
        return pymysql.connect(host="127.0.0.1", user="root", database=self.name, autocommit=True)

    def execute(self, *statements: str, params: Any = None) -> None:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                for sql in statements:
                    cur.execute(sql, params)
        finally:
            conn.close()

    def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.executemany(sql, rows)
        finally:
            conn.close()

    @property
    def profile(self) -> str:
        user = "postgres" if self.kind == "postgres" else "root"
        return (
            "default:\n  connections:\n    db:\n"
            f"      {{type: {self.kind}, host: 127.0.0.1, user: {user}, database: {self.name}}}\n"
        )


@contextmanager
def database(kind: str) -> Iterator[Db]:
    name = f"rivc_test_{secrets.token_hex(4)}"
    if kind == "postgres":
        admin = psycopg.connect(
            host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True
        )
        admin.execute(f"CREATE DATABASE {name}")
        try:
            yield Db(kind, name)
        finally:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin.close()
    else:
        admin = pymysql.connect(host="127.0.0.1", user="root", autocommit=True)
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
        try:
            yield Db(kind, name)
        finally:
            with admin.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {name}")
            admin.close()


def project(root: Path, db: Db, tables: str, models: dict[str, str], sinks: str = "") -> Path:
    """A project whose source `src` on `db` has `tables` (YAML list items, indented 6)."""
    files = {
        "rivc_project.yml": "name: rel\n",
        "profiles.yml": db.profile,
        "sources/src.yml": "sources:\n  - name: src\n    connector: "
        f"{db.kind}\n    connection: db\n    tuning: {{profile: fast, retry_backoff_ms: 100}}\n"
        "    tables:\n" + textwrap.indent(textwrap.dedent(tables).strip("\n"), "      ") + "\n",
        **{f"models/{name}.sql": sql for name, sql in models.items()},
    }
    if sinks:
        files["sinks/out.yml"] = textwrap.dedent(sinks)
    return write_files(root, files)
