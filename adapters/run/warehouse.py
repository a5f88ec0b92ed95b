"""rivc's own area of the warehouse, and the id of the project that writes there.

    <warehouse>/_rivc/writer          this project's writer id
    <warehouse>/_rivc/landing/<s.t>   the landing table of each extracted source table

The writer id names the project in every table it writes outside the warehouse (a sink's table
property or marker). Two checkouts with a warehouse each are two writers, and one refuses a table
the other writes; checkouts that share one warehouse share its landing tables and are one
writer. The id lives in the warehouse, with a copy in `.rivc/` that gives a re-created warehouse
its id back.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from rivc.compiler.loading.locate import STATE_DIR

from ..util.storage import Store, join

AREA = "_rivc"
WRITER = "writer"


def landing_uri(warehouse: str, fqn: str) -> str:
    return join(warehouse, AREA, "landing", fqn)


def writer_id(warehouse: str, store: Store, root: Path) -> str:
    """This project's writer id: the warehouse's, else the one `.rivc/` kept, else a new one;
    written to both."""
    fs, path = store.filesystem(join(warehouse, AREA, WRITER))
    info = fs.get_file_info(path)
    kept = root / STATE_DIR / WRITER
    found = None
    if info.type.name == "File":
        with fs.open_input_stream(path, compression=None) as handle:
            found = handle.read().decode().strip() or None
    if found is None:
        found = (kept.read_text().strip() if kept.is_file() else "") or secrets.token_hex(6)
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(path, compression=None) as out:
            out.write(found.encode())
    if not kept.is_file() or kept.read_text().strip() != found:
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(found + "\n")
    return found
