"""The one filesystem layer: where a table or file lives, opened the same way by the rivc process
and by Spark's executors.

A location is a local path (relative to the project) or a URI: file://, s3://, gs://, abfss://.
Credentials and endpoints come from each store's standard environment variables, with the
profile's `storage:` block and a sink's `storage_options` on top. They travel to Spark's tasks
inside the closures that write and read (`Store` is picklable) and are never printed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .sparkkind import is_connect

if TYPE_CHECKING:
    import pyarrow.fs as pafs

# the environment variables each store reads (object_store's names, which delta-rs uses too)
ENV = {
    "s3": (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ALLOW_HTTP",
        "AWS_S3_ALLOW_UNSAFE_RENAME",
    ),
    "gs": ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_SERVICE_ACCOUNT", "GOOGLE_CLOUD_PROJECT"),
    "az": (
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_CLIENT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_TENANT_ID",
        "AZURE_STORAGE_USE_EMULATOR",  # Azurite, the local emulator
        "AZURITE_BLOB_STORAGE_URL",  # its address, when not http://127.0.0.1:10000
    ),
}
# Azurite's well-known development account (public, the same in every copy of it)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
STORES = {
    "": "file",
    "file": "file",
    "s3": "s3",
    "s3a": "s3",
    "gs": "gs",
    "gcs": "gs",
    "abfss": "az",
    "abfs": "az",
    "az": "az",
}


def scheme(uri: str) -> str:
    head, sep, _ = uri.partition("://")
    return head.lower() if sep else ""


def resolve(value: str, root: Path) -> str:
    """A location as rivc hands it on: a URI as it is, a local path made absolute."""
    if scheme(value):
        return value.removeprefix("file://") if scheme(value) == "file" else value
    return str((root / value).resolve())


def is_local(uri: str) -> bool:
    return STORES.get(scheme(uri)) == "file"


_SAME_DISK: set[str] = set()  # Spark Connect sessions of a server on this machine (rivc server)


def mark_same_disk(spark: object) -> None:
    """Record that a Spark Connect session's server runs on this machine, as the project's warm
    server does: it reads and writes rivc's own disk."""
    _SAME_DISK.add(str(getattr(spark, "session_id", "")))


def shares_disk(spark_or_df: object) -> bool:
    """Whether Spark's executors see rivc's disk: a classic session on a local master
    (`local[...]`, `local-cluster[...]`), or a Connect session marked with mark_same_disk. A
    cluster's executors (`spark://`, yarn, k8s) write on their own machines even when the
    driver is rivc's process. Decides the data paths, not whether Spark is Connect."""
    spark = getattr(spark_or_df, "sparkSession", spark_or_df)
    if not is_connect(spark):
        return str(spark.sparkContext.master).startswith("local")  # type: ignore[attr-defined]
    return str(getattr(spark, "session_id", None)) in _SAME_DISK


def environment() -> dict[str, str]:
    """The stores' variables (ENV) set in this process, for a process that runs rivc's code
    with an environment of its own (a Spark Connect server's Python worker)."""
    names = {n for kind in ENV.values() for n in kind}
    return {k: v for k, v in os.environ.items() if k in names}


def join(uri: str, *parts: str) -> str:
    return "/".join([uri.rstrip("/"), *(p.strip("/") for p in parts)])


@dataclass(frozen=True)
class Store:
    """How to reach one location's store: the options of its kind, from the environment and the
    project. Picklable, so Spark's tasks get the same credentials as the rivc process."""

    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, uri: str, *given: Mapping[str, str]) -> Store:
        kind = STORES.get(scheme(uri), "file")
        options = {k: v for k, v in os.environ.items() if k in ENV.get(kind, ())}
        for extra in given:
            options.update({k.upper(): str(v) for k, v in extra.items()})
        if kind == "s3" and "AWS_REGION" not in options and "AWS_DEFAULT_REGION" in options:
            options["AWS_REGION"] = options["AWS_DEFAULT_REGION"]
        if kind == "s3":  # delta-rs renames on S3 only with a lock or this promise (one writer)
            options.setdefault("AWS_S3_ALLOW_UNSAFE_RENAME", "true")
        return cls(options)

    @property
    def delta(self) -> dict[str, str] | None:
        """delta-rs's storage_options."""
        return dict(self.options) or None

    def filesystem(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem and the path inside it."""
        import pyarrow.fs as pafs

        kind = STORES.get(scheme(uri), "file")
        rest = uri.split("://", 1)[1] if "://" in uri else uri
        o = self.options
        if kind == "file":
            return pafs.LocalFileSystem(), rest
        if kind == "s3":
            endpoint = o.get("AWS_ENDPOINT_URL", "")
            http = endpoint.startswith("http://") or o.get("AWS_ALLOW_HTTP", "").lower() == "true"
            return (
                pafs.S3FileSystem(
                    access_key=o.get("AWS_ACCESS_KEY_ID"),
                    secret_key=o.get("AWS_SECRET_ACCESS_KEY"),
                    session_token=o.get("AWS_SESSION_TOKEN"),
                    # an endpoint of one's own (MinIO, moto) has no region to discover
                    region=o.get("AWS_REGION") or ("us-east-1" if endpoint else None),
                    endpoint_override=endpoint.split("://", 1)[-1] or None,
                    scheme="http" if http else "https",
                ),
                rest,
            )
        if kind == "gs":
            return pafs.GcsFileSystem(project_id=o.get("GOOGLE_CLOUD_PROJECT")), rest
        account = o.get("AZURE_STORAGE_ACCOUNT_NAME")
        container, _, path = rest.partition("/")
        if "@" in container:  # abfss://container@account.dfs.core.windows.net/path
            container, _, host = container.partition("@")
            account = account or host.split(".", 1)[0]
        emulator: dict[str, Any] = {}
        key = o.get("AZURE_STORAGE_ACCOUNT_KEY")
        if o.get("AZURE_STORAGE_USE_EMULATOR", "").lower() == "true":  # as object_store does
            url = o.get("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:10000").rstrip("/")
            web, _, authority = url.partition("://")
            emulator = {
                "blob_storage_authority": authority,
                "blob_storage_scheme": web,
                "dfs_storage_authority": authority,
                "dfs_storage_scheme": web,
            }
            account = o.get("AZURE_STORAGE_ACCOUNT_NAME") or AZURITE_ACCOUNT
            key = key or AZURITE_KEY
        return (
            pafs.AzureFileSystem(
                account_name=account or "",
                account_key=key,
                sas_token=o.get("AZURE_STORAGE_SAS_TOKEN"),
                client_id=o.get("AZURE_CLIENT_ID"),
                client_secret=o.get("AZURE_CLIENT_SECRET"),
                tenant_id=o.get("AZURE_TENANT_ID"),
                **emulator,
            ),
            f"{container}/{path}",
        )

    def files(self, uri: str, suffix: str = "") -> list[tuple[str, int]]:
        """The data files under `uri` (any depth) as URIs with their sizes, in name order; none
        if it is missing. Hidden and bookkeeping files (`.crc`, `_SUCCESS`) are left out."""
        import pyarrow.fs as pafs

        fs, base = self.filesystem(uri)
        base = base.rstrip("/")
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        return sorted(
            (join(uri, i.path[len(base) :]), i.size or 0)
            for i in infos
            if i.type == pafs.FileType.File
            and i.base_name.endswith(suffix)
            and not i.base_name.startswith((".", "_"))
        )

    def exist(self, uris: list[str]) -> bool:
        """True when every one of `uris` is a file (one listing call per store)."""
        import pyarrow.fs as pafs

        if not uris:
            return True
        fs, _ = self.filesystem(uris[0])
        infos = fs.get_file_info([self.filesystem(u)[1] for u in uris])
        return all(i.type == pafs.FileType.File for i in infos)

    def remove_tree(self, uri: str) -> None:
        """Delete everything under `uri`; a missing directory is not an error."""
        fs, path = self.filesystem(uri)
        try:
            fs.delete_dir(path)
        except (FileNotFoundError, OSError):
            pass

    def __repr__(self) -> str:  # the options hold secrets
        return f"Store({sorted(self.options)})"
