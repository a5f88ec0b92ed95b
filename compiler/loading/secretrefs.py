"""References to secrets in profiles.yml's values: `${file:PATH}` (a mounted secret) and
`${vault:PATH#FIELD}` (a field of a secret in HashiCorp Vault), each resolved by the provider
its scheme names when the profile is read. A provider is a class with `scheme` and `read`; the
text it returns replaces the reference. A reference that cannot be resolved is a ValueError
naming the reference and why (profiles.py puts it at its line); the secret's value is never
part of a message."""

from __future__ import annotations

import json
import os
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol


class SecretProvider(Protocol):
    scheme: ClassVar[str]  # the word before the colon in ${scheme:reference}

    def read(self, reference: str, base: Path, env: Mapping[str, str]) -> str:
        """The secret's text; ValueError naming why it cannot be had."""
        ...


class FileSecrets:
    """`${file:PATH}`: the file's text without its final newline; a relative PATH is from
    profiles.yml's folder."""

    scheme: ClassVar[str] = "file"

    def read(self, reference: str, base: Path, env: Mapping[str, str]) -> str:
        path = (base / Path(reference.strip()).expanduser()).resolve()
        try:
            return path.read_text().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or type(exc).__name__
            raise ValueError(f"cannot read {path}: {why}") from None


VAULT_TIMEOUT = 10.0  # seconds for one request to Vault: an unreachable server is named, no hang


class VaultSecrets:
    """`${vault:PATH#FIELD}`: FIELD of the secret Vault's HTTP API serves at /v1/PATH (a KV
    version 2 path names its `data/`, as `secret/data/postgres`; version 1's has none). Vault is
    reached as its own CLI reaches it: `VAULT_ADDR`, `VAULT_TOKEN` (else the token file
    `~/.vault-token` its login leaves), `VAULT_NAMESPACE`, `VAULT_CACERT` (a CA bundle),
    from the environment or the `.env` beside profiles.yml."""

    scheme: ClassVar[str] = "vault"

    def read(self, reference: str, base: Path, env: Mapping[str, str]) -> str:
        path, hashed, field = reference.strip().partition("#")
        path = path.strip("/ ")
        if not hashed or not field or not path:
            raise ValueError("expected ${vault:PATH#FIELD}, as ${vault:secret/data/pg#password}")
        address = env.get("VAULT_ADDR")
        if not address:
            raise ValueError("VAULT_ADDR is not set (the Vault server's URL)")
        token = env.get("VAULT_TOKEN") or _token_file(env)
        if not token:
            raise ValueError("no Vault token: set VAULT_TOKEN (or log in: ~/.vault-token)")
        headers = {"X-Vault-Token": token}
        if env.get("VAULT_NAMESPACE"):
            headers["X-Vault-Namespace"] = env["VAULT_NAMESPACE"]
        url = f"{address.rstrip('/')}/v1/{path}"
        body = _get(url, headers, env.get("VAULT_CACERT"))
        data = body.get("data") if isinstance(body, dict) else None
        if isinstance(data, dict) and isinstance(data.get("data"), dict) and "metadata" in data:
            data = data["data"]  # KV version 2: the secret's fields under data.data
        if not isinstance(data, dict):
            raise ValueError(f"Vault's answer for {path} holds no data")
        if field not in data:
            fields = ", ".join(sorted(map(str, data))) or "none"
            raise ValueError(f"the secret at {path} has no field {field!r} (fields: {fields})")
        value = data[field]
        return value if isinstance(value, str) else json.dumps(value)


def _token_file(env: Mapping[str, str]) -> str | None:
    home = env.get("HOME") or os.path.expanduser("~")
    try:
        return (Path(home) / ".vault-token").read_text().strip() or None
    except OSError:
        return None


_STATUS = {403: "permission denied (the token's policy, or an expired token)", 404: "not found"}


def _get(url: str, headers: Mapping[str, str], cafile: str | None) -> Any:
    context = ssl.create_default_context(cafile=cafile) if url.startswith("https:") else None
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=VAULT_TIMEOUT, context=context) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        why = _STATUS.get(exc.code, exc.reason)
        raise ValueError(f"Vault answered {exc.code} for {url}: {why}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ValueError(f"cannot reach Vault at {url}: {reason}") from None
    except ValueError:
        raise ValueError(f"Vault's answer for {url} is not JSON") from None


PROVIDERS: dict[str, SecretProvider] = {p.scheme: p for p in (FileSecrets(), VaultSecrets())}

_REFERENCE = re.compile(r"\$\{(" + "|".join(PROVIDERS) + r"):([^}]+)\}")


def resolve(value: Any, base: Path, env: Mapping[str, str]) -> Any:
    """A value's references replaced by what their providers read."""
    if not isinstance(value, str) or "${" not in value:
        return value

    def read(m: re.Match[str]) -> str:
        try:
            return PROVIDERS[m.group(1)].read(m.group(2), base, env)
        except ValueError as exc:
            raise ValueError(f"{m.group(0)}: {exc}") from None

    return _REFERENCE.sub(read, value)
