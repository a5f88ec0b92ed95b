"""Rendering SQL: Jinja, ${params}, sink and source transforms, the sandbox, relation names."""
