"""The Jinja environment rivc renders a project's files in: Jinja's sandbox, as dbt renders
(docs/security.md).

`rivc compile` and `rivc lint` run in CI on pull requests from people a team may not trust yet,
so a template is code that must not reach the machine: the sandbox refuses attributes and
methods that lead out of the template's context (`__class__`, `__globals__`, a function's code,
`mro()`, str.format's attribute lookups), and the error names the file and line. The context
a template sees is dbt's, unchanged.

dbt's rule for secrets holds too: an environment variable named `DBT_ENV_SECRET...` may be read
only where dbt allows it (profiles.yml, packages.yml), never in a model, macro, test, hook or
dbt_project.yml, whose rendering lands in target/.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

SECRET_ENV_PREFIX = "DBT_ENV_SECRET"


class Sandbox(SandboxedEnvironment):
    """Jinja's sandbox that refuses an unsafe attribute at once. Jinja's own gives an
    undefined value, which a lenient template (a macro's) would print as nothing."""

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if (
            getattr(type(obj), "macro_namespace", False)
            and not attr.startswith("__")
            and obj.has_macro(attr)
        ):
            return True  # a package's macro: `dbt_utils._is_relation`
        return bool(super().is_safe_attribute(obj, attr, value))

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe."
        )


def environment(**options: Any) -> SandboxedEnvironment:
    """A sandboxed environment with `options` (a loader, `undefined`, extensions...)."""
    options.setdefault("autoescape", False)
    return Sandbox(**options)


def refused(text: str) -> str | None:
    """Why a template must not render, known without rendering it (for values whose file and
    line are known only where they are read, dbt_project.yml's): an attribute or key of a
    leading underscore (the sandbox's refusal), or `env_var` of a secret. None when neither
    shows; rendering still checks what only a render can."""
    from jinja2 import TemplateSyntaxError, nodes

    try:
        tree = environment().parse(text)
    except TemplateSyntaxError as exc:
        return f"template syntax error: {exc.message}"
    for node in tree.find_all((nodes.Getattr, nodes.Getitem, nodes.Call)):
        if isinstance(node, nodes.Getattr) and node.attr.startswith("_"):
            return f"access to attribute {node.attr!r} is unsafe."
        if (
            isinstance(node, nodes.Getitem)
            and isinstance(node.arg, nodes.Const)
            and str(node.arg.value).startswith("_")
        ):
            return f"access to item {node.arg.value!r} is unsafe."
        if (
            isinstance(node, nodes.Call)
            and isinstance(node.node, nodes.Name)
            and node.node.name == "env_var"
            and node.args
            and isinstance(node.args[0], nodes.Const)
        ):
            secret = secret_elsewhere(str(node.args[0].value))
            if secret is not None:
                return secret
    return None


def secret_elsewhere(name: str) -> str | None:
    """dbt's refusal of a secret environment variable outside profiles.yml and packages.yml,
    or None when `name` is not one."""
    if not name.startswith(SECRET_ENV_PREFIX):
        return None
    return (
        "Secret env vars are allowed only in profiles.yml or packages.yml. "
        f"Found '{name}' referenced elsewhere."
    )


def render_value(
    value: Any,
    env: Mapping[str, str],
    secrets: bool = False,
    used: dict[str, str | None] | None = None,
    **context: Any,
) -> Any:
    """A YAML value's `{{ env_var('X', 'default') }}` (and what `context` gives it: `var`,
    `target`) rendered as dbt renders config values; a rendered true/false is a boolean.
    `secrets`: DBT_ENV_SECRET_* may be read (profiles.yml); `used` records each variable read.
    A failure is a ValueError for the caller to place."""
    if not isinstance(value, str) or ("{{" not in value and "{%" not in value):
        return value
    import jinja2

    def env_var(name: str, default: str | None = None) -> str:
        refused = None if secrets else secret_elsewhere(name)
        if refused is not None:
            raise ValueError(refused)
        if used is not None:
            used[name] = env.get(name)
        found = env.get(name, default)
        if found is None:
            raise ValueError(f"env_var({name!r}): the variable is not set and there is no default")
        return str(found)

    try:
        text = environment().from_string(value).render(env_var=env_var, **context)
    except jinja2.TemplateError as exc:
        raise ValueError(f"cannot render {value!r}: {exc}") from None
    return {"true": True, "false": False}.get(text.strip().lower(), text)
