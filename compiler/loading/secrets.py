"""Secrets are declared on the specs, never guessed from a field's name (docs/security.md).

A field that holds a secret has a secret type: `SecretStr` (a password, a token), `SecretUrl`
(a URL whose userinfo and credential query parameters are secret; `SecretPathUrl` also its path,
as a Slack-style webhook's), `SecretEnv` (the name of an environment variable that holds one),
and for maps passed to another system as they are, `secret_map(...)` with the keys that system
documents as credentials, or with the keys it documents as public (every other value secret).

- Dumped as JSON (the manifest, run_results, lineage, the docs site) a secret field is masked
  by its own serializer; in Python the spec keeps the value the runtime needs.
- `secret_values(spec, env)` collects every secret a loaded project holds (the environment's
  values of the variables `SecretEnv` fields name included), and `Scrubber` masks them in any
  text rivc prints or writes: errors, node messages, the state store, errors.log.
- `redact_text` masks a URL's password in free text that comes from elsewhere (a driver's
  error message), by the URL's shape.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel

MASK = "****"
MIN_SCRUBBED = 4  # a secret shorter than this would mask ordinary text; it is still never dumped

# query parameters that carry credentials, by the names URLs give them (Slack's `sig`, S3's
# `X-Amz-Signature`, Azure's `sig`, ...); matched whole, case-insensitively
CREDENTIAL_PARAMETERS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "token",
        "access_token",
        "auth",
        "secret",
        "client_secret",
        "api_key",
        "apikey",
        "key",
        "sig",
        "signature",
        "x-amz-signature",
        "x-amz-security-token",
        "x-amz-credential",
    }
)


@dataclass(frozen=True)
class Secret:
    """The mark of a secret field (pydantic metadata): its JSON dump is masked, and
    `secret_values` and the spec's error messages (which never echo such a value) read it."""

    kind: Literal["value", "url", "path_url", "env", "env_map", "map"]
    keys: frozenset[str] = frozenset()  # a map's credential keys (or, `public`, its others)
    public: bool = False  # `keys` lists the public keys: every other value is secret

    def secret_key(self, key: str) -> bool:
        """Whether a map's value under `key` is secret."""
        return (key.lower() in self.keys) != self.public

    def mask(self, value: Any, info: Any = None) -> Any:
        """The value as a JSON dump shows it (as it is for `with_secrets`)."""
        if info is not None and (info.context or {}).get(REVEAL):
            return value
        if self.kind == "value":
            return _mask(value)
        if self.kind in ("url", "path_url"):
            return mask_url(value, self.kind == "path_url")
        if self.kind == "map":
            # a public value keeps its text, but for a URL's password (an endpoint's userinfo)
            return {k: _mask(v) if self.secret_key(k) else redact_text(v) for k, v in value.items()}
        return value  # a variable's name

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        schema = handler(source)
        schema["serialization"] = core_schema.plain_serializer_function_ser_schema(
            self.mask, info_arg=True, when_used="json"
        )
        return schema


REVEAL = "rivc.secrets"  # the serialization context key of `with_secrets`


def with_secrets(spec: BaseModel) -> str:
    """A spec as JSON with its secrets, for the one place that needs them whole: a Spark data
    source's option, read back by its tasks."""
    return spec.model_dump_json(context={REVEAL: True})


def _mask(value: Any) -> Any:
    return MASK if value not in (None, "") else value


# Schemes whose userinfo without a password is a user name, not a token (as it is in
# https://TOKEN@host or nats://TOKEN@host): the name stays visible.
USER_SCHEMES = frozenset(
    {"amqp", "amqps", "postgres", "postgresql", "mysql", "mariadb", "mqtt", "mqtts", "redis"}
)


def _token(scheme: str, password: str) -> bool:
    """Whether a URL's userinfo is a token: it has no password and the scheme has no users."""
    return not password and scheme.lower() not in USER_SCHEMES


def mask_url(url: str, path: bool = False) -> str:
    """A URL with its password (or a token in its userinfo) and its credential parameters
    masked; with `path`, everything after the host too. A comma-separated list of URLs (NATS's
    servers) is masked URL by URL."""
    if "," in url:
        return ",".join(mask_url(one, path) for one in url.split(","))
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    if not parts.scheme or not parts.netloc:
        return MASK if path else url
    host = parts.netloc.rpartition("@")[2]
    netloc = host
    if "@" in parts.netloc:
        user, _, password = parts.netloc.rpartition("@")[0].partition(":")
        if password:
            netloc = f"{user}:{MASK}@{host}"
        else:
            netloc = f"{MASK}@{host}" if _token(parts.scheme, password) else f"{user}@{host}"
    if path:
        tail = "/" + MASK if parts.path.strip("/") or parts.query else ""
        return urlunsplit((parts.scheme, netloc, tail, "", ""))
    query = urlencode(
        [
            (k, MASK if k.lower() in CREDENTIAL_PARAMETERS else v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
        ],
        safe="*",
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _url_secrets(url: str, path: bool) -> dict[str, str]:
    """The secret pieces of a URL as they appear in text, each with what replaces it: its
    password or userinfo token and credential parameters; with `path`, the whole URL (with
    and without its query), which text shows whole (a path alone may be any path)."""
    out: dict[str, str] = {}
    for one in url.split(","):
        try:
            parts = urlsplit(one.strip())
        except ValueError:
            continue
        if "@" in parts.netloc:
            user, _, password = parts.netloc.rpartition("@")[0].partition(":")
            if password or _token(parts.scheme, password):
                out[password or user] = MASK
        out.update(
            {v: MASK for k, v in parse_qsl(parts.query) if k.lower() in CREDENTIAL_PARAMETERS}
        )
        if path:
            bare = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
            out[one.strip()] = mask_url(one.strip(), True)
            out[bare] = mask_url(bare, True)
    return out


SecretStr = Annotated[str, Secret("value")]
SecretUrl = Annotated[str, Secret("url")]
SecretPathUrl = Annotated[str, Secret("path_url")]
SecretEnv = Annotated[str, Secret("env")]  # the variable's name shows; its value is secret
# key -> the variable holding its value, or a text naming variables as `{NAME}` ("Bearer {TOKEN}")
SecretEnvMap = Annotated[dict[str, str], Secret("env_map")]
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def env_names(value: str) -> list[str]:
    """The variables an `env_map` value names: its `{NAME}`s, or itself."""
    return _PLACEHOLDER.findall(value) or [value]


def from_env(value: str, env: Mapping[str, str]) -> str:
    """An `env_map` value with its variables' values: `{NAME}`s filled in, or the variable's."""
    if _PLACEHOLDER.search(value):
        return _PLACEHOLDER.sub(lambda m: env.get(m.group(1), ""), value)
    return env.get(value, "")


def secret_keys(*keys: str, public: bool = False) -> Secret:
    """The mark of a map whose values under `keys` are secret (with `public`: whose values
    under any other key are), for settings passed as they are to a system that documents which
    keys carry credentials: `Annotated[dict[str, str], secret_keys(...)]`."""
    return Secret("map", frozenset(k.lower() for k in keys), public)


# object stores' settings (the profile's `storage:`, a sink's `storage_options`): every value
# is a credential but those named here (where the store is, how it is reached)
StorageOptions = Annotated[
    dict[str, str],
    secret_keys(
        "region",
        "aws_region",
        "endpoint",
        "endpoint_url",
        "aws_endpoint",
        "aws_endpoint_url",
        "allow_http",
        "aws_allow_http",
        "aws_virtual_hosted_style_request",
        "virtual_hosted_style_request",
        "aws_s3_allow_unsafe_rename",
        "azure_storage_account_name",
        "account_name",
        "azure_use_emulator",
        "use_emulator",
        "google_project_id",
        "timeout",
        "connect_timeout",
        public=True,
    ),
]


def mark_of(annotation: Any) -> Secret | None:
    """The Secret mark of a field's annotation (inside an Optional or a union too)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        base, *meta = typing.get_args(annotation)
        found = next((m for m in meta if isinstance(m, Secret)), None)
        return found or mark_of(base)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = mark_of(arg)
            if found is not None:
                return found
    return None


def field_mark(model: type[BaseModel], name: str) -> Secret | None:
    info = model.model_fields.get(name)
    if info is None:
        return None
    return next((m for m in info.metadata if isinstance(m, Secret)), None) or mark_of(
        info.annotation
    )


def secret_values(value: Any, env: Mapping[str, str]) -> dict[str, str]:
    """Every secret `value` (a spec, or lists and maps of specs) holds, each with what replaces
    it in text: declared fields' values, the secret parts of declared URLs, and the
    environment's values of declared variables."""
    found: dict[str, str] = {}
    _collect(value, env, found)
    return {k: v for k, v in found.items() if k}


def _collect(value: Any, env: Mapping[str, str], found: dict[str, str]) -> None:
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            field = getattr(value, name)
            mark = field_mark(type(value), name)
            if mark is not None and field is not None:
                found.update(_secrets_of(mark, field, env))
            else:
                _collect(field, env, found)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect(item, env, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, env, found)


def _secrets_of(mark: Secret, value: Any, env: Mapping[str, str]) -> dict[str, str]:
    if mark.kind in ("url", "path_url"):
        return _url_secrets(str(value), mark.kind == "path_url")
    if mark.kind == "value":
        found = [str(value)]
    elif mark.kind == "env":
        found = [env.get(str(value), "")]
    elif mark.kind == "env_map":
        found = [env.get(n, "") for v in value.values() for n in env_names(str(v))]
    else:
        found = [str(v) for k, v in value.items() if mark.secret_key(str(k)) and v is not None]
    return dict.fromkeys(found, MASK)


class Scrubber:
    """Replaces known secrets in text (longest first, so one holding another goes whole), then
    URL passwords by their shape."""

    def __init__(self, secrets: Mapping[str, str] | Iterable[str] = ()) -> None:
        given = secrets if isinstance(secrets, Mapping) else dict.fromkeys(secrets, MASK)
        self.secrets = {k: v for k, v in given.items() if len(k) >= MIN_SCRUBBED}
        ordered = sorted(self.secrets, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(s) for s in ordered)) if ordered else None

    def __call__(self, text: str) -> str:
        if self._pattern is not None:
            text = self._pattern.sub(lambda m: self.secrets[m.group(0)], text)
        return redact_text(text)


_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@")
_URL_QUERY_SECRET = re.compile(
    r"(?P<k>[?&;](?:" + "|".join(re.escape(k) for k in sorted(CREDENTIAL_PARAMETERS)) + r")=)"
    r"[^&;\s]+",
    re.I,
)


def redact_text(text: str) -> str:
    """Mask passwords inside URLs found in free text (and credential query parameters)."""
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _URL_QUERY_SECRET.sub(lambda m: f"{m['k']}{MASK}", text)
