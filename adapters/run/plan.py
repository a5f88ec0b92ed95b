"""The compiled project as a run sees it: the typed manifest, the compiled SQL (a snapshot that
a concurrent compile cannot change) and the project's specs, which carry the connector configs
and secrets the manifest redacts.

An in-process run builds its Plan from the compile it just did (`from_compiled`); only a
generated job, which starts from target/, loads one (`load`) and reads the project's specs for
the secrets that target/ never holds."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from rivc.compiler.emit.manifest import MANIFEST_FILE, Manifest, ManifestNode
from rivc.compiler.errors import StateError
from rivc.compiler.loading.locate import TARGET_DIR
from rivc.compiler.loading.project import Project, load_project, project_secrets
from rivc.compiler.loading.secrets import Scrubber
from rivc.compiler.loading.specs import ProfileSpec

from ..ingest.landing import Landing
from ..util.storage import Store, resolve
from .warehouse import landing_uri


@dataclass(frozen=True)
class Plan:
    """A compiled project as the runtime needs it: the manifest, compiled SQL and the profile."""

    root: Path
    manifest: Manifest
    project: Project  # connector configs with their secrets, which the manifest redacts
    compiled: dict[str, str]  # path under target/ -> SQL, read once: a snapshot for the run

    @classmethod
    def load(cls, root: Path, env: Mapping[str, str] | None = None) -> Plan:
        path = root / TARGET_DIR / MANIFEST_FILE
        try:
            manifest = Manifest.loads(path.read_text())
        except OSError:
            raise StateError(f"{path}: not found; run `rivc compile` first") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise StateError(f"{path}: {exc}") from None
        compiled = {}
        for node in manifest.nodes.values():
            batches = node.sink.compiled_batches_path if node.kind == "sink" else None
            paths = (node.compiled_path, *node.compiled_variants.values(), batches)
            for rel in paths:
                if rel is not None:
                    try:
                        compiled[rel] = (root / TARGET_DIR / rel).read_text()
                    except OSError:
                        pass  # named in the error of sql() if a node needs it
        project = load_project(root, os.environ if env is None else env)
        edited = _edited_since_compile(manifest, project)
        if edited is not None:
            raise StateError(
                f"{edited}: changed since `rivc compile` wrote {TARGET_DIR}/ (or its environment "
                "variables did); compile again, so that what runs is what was compiled"
            )
        return cls(root, manifest, project, compiled)

    @classmethod
    def from_compiled(cls, root: Path, project: Project, files: Mapping[str, str]) -> Plan:
        """The plan of an in-process run: the compile's own output, nothing read back."""
        manifest = Manifest.loads(files[MANIFEST_FILE])
        compiled = {path: text for path, text in files.items() if path.startswith("compiled/")}
        return cls(root, manifest, project, compiled)

    @property
    def profile(self) -> ProfileSpec:
        return self.project.profile

    @cached_property
    def scrub(self) -> Scrubber:
        """Masks the project's secrets (declared on its specs) in any text a run prints or
        writes: node errors and messages, warnings, errors.log (compiler/loading/secrets.py)."""
        return Scrubber(project_secrets(self.project, os.environ))

    @property
    def nodes(self) -> dict[str, ManifestNode]:
        return self.manifest.nodes

    def is_extracted(self, nid: str) -> bool:
        """A relational or change-log source table: run (extracted, landed) whenever something
        reads it."""
        node = self.nodes[nid]
        if node.kind != "source":
            return False
        connector = self.project.sources[node.name].connector
        return connector.relational or connector.log is not None

    @property
    def warehouse(self) -> str:
        """Where model tables live: a URI, or an absolute local path."""
        return resolve(self.profile.warehouse, self.root)

    def store(self, uri: str, *given: dict[str, str]) -> Store:
        """How to reach `uri`: the environment, the profile's `storage:`, then `given`."""
        return Store.of(uri, dict(self.profile.storage), *given)

    def landing(self, nid: str) -> Landing:
        """The landing table of an extracted source table (landing.py)."""
        node = self.nodes[nid]
        source = self.project.sources[node.name]
        table = source.table
        uri = landing_uri(self.warehouse, node.name)
        role = "log" if table.mode == "incremental" or source.connector.log else "snapshot"
        return Landing(uri, self.store(uri), role, table.unique_key, table.cursor_column)

    def sql(self, nid: str, variant: str | None = None) -> str:
        """A node's compiled SQL, or its named `variant` (a model without that variant runs
        its SQL: one without an is_incremental() block runs the same SQL either way)."""
        node = self.nodes[nid]
        rel = node.compiled_variants.get(variant or "", node.compiled_path)
        if rel is None:
            raise StateError(f"{nid} has no compiled SQL in target/; run `rivc compile` first")
        if str(rel) not in self.compiled:
            raise StateError(f"{nid}: target/{rel} is missing; run `rivc compile` first")
        return self.compiled[str(rel)]

    def batch_sql(self, nid: str) -> str:
        """A sink's SQL over the new batches of its changing sources (compiler/analysis/increments.py)."""
        rel = self.nodes[nid].sink.compiled_batches_path
        if rel is None or rel not in self.compiled:
            raise StateError(f"{nid}: its batch SQL is missing from target/; run `rivc compile`")
        return self.compiled[rel]

    def upstream(self, nid: str) -> list[str]:
        """Every ancestor of `nid`, in manifest (topological) order."""
        seen: set[str] = set()
        stack = [nid]
        while stack:
            for dep in self.nodes[stack.pop()].depends_on:
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        return [n for n in self.nodes if n in seen]


def _edited_since_compile(manifest: Manifest, project: Project) -> str | None:
    """The spec file of a source or sink whose config, as re-read now, differs from what the
    manifest recorded at compile (compared as the manifest holds it: secrets masked)."""
    for node in manifest.nodes.values():
        now: object = None
        if node.kind == "sink":
            sink = project.sinks.get(node.name)
            now = None if sink is None else sink.config.model_dump(mode="json")
            if now != node.sink.config:
                return node.path
        elif node.kind == "source":
            source = project.sources.get(node.name)
            dumped = None if source is None else source.manifest_table()
            if dumped != node.source.table:
                return node.path
    return None
