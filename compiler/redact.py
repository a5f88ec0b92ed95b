"""Keep secrets out of messages, logs and artifacts."""

from __future__ import annotations

import re
from typing import Any

MASK = "****"
_SECRET_KEY = re.compile(
    r"(^|[_.-])(password|passwd|pwd|secret|token|credentials?|api[_-]key|private[_-]key)$"
    r"|[_.-]key$",
    re.I,
)
_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@")
_URL_QUERY_SECRET = re.compile(
    r"(?P<k>[?&;](?:password|token|secret|access_token|api_key)=)[^&;\s]+", re.I
)


def is_secret_key(key: str) -> bool:
    """True for option names whose values must never be shown (password, *_key, token, ...)."""
    return bool(_SECRET_KEY.search(key)) and not key.lower().endswith(("_env", "key_fields"))


def redact_text(text: str) -> str:
    """Mask passwords inside URLs found in free text."""
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _URL_QUERY_SECRET.sub(lambda m: f"{m['k']}{MASK}", text)


def redact(value: Any, key: str = "") -> Any:
    """A copy of `value` with secret-looking keys masked and URL credentials removed."""
    if key and is_secret_key(key) and value not in (None, ""):
        return MASK
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
