"""Fault injection for the fault suite: `RIVC_FAULT=<point>[:<node name>]` makes the process
kill itself (SIGKILL, as a crash or an OOM kill would) when it reaches that point.

Points (docs/running.md, "What a rerun after a crash does"):
    mid-extraction   a COPY extraction in rivc's process, after its first block is staged
    after-staging    an extraction's files are staged in its landing table, before the commit
    between-chunks   a chunked extraction committed a group of chunks, before the next group;
                     a postgres-cdc snapshot landed a part, before the next
    between-batches  a microbatch model committed a batch, before the next
    after-landing    an extraction's batch is committed to its landing table, before any
                     consumer reads it
    before-commit    Spark's tasks wrote a Delta or Iceberg batch's files, or `rivc maintain`
                     an Iceberg table's compacted files, before the commit (named by the
                     table: its directory name, or the Iceberg table's name)
    mid-publish      the nats sink published part of a batch from rivc's process, before the rest
                     (named by the stream)
    after-commit     a sink's or model's table commit landed, before the state store records it
    between-sinks    a sink node finished and was recorded, before the next node starts
    mid-retention    `rivc maintain` folded a landing table's old batches, before removing
                     the snapshots it no longer needs
"""

from __future__ import annotations

import os
import signal

POINTS = frozenset(
    {
        "mid-extraction",
        "after-staging",
        "between-chunks",
        "between-batches",
        "after-landing",
        "before-commit",
        "mid-publish",
        "after-commit",
        "between-sinks",
        "mid-retention",
    }
)


def carried() -> dict[str, str]:
    """The fault to inject, for a process that runs rivc's code with an environment of its own
    (a Spark Connect server's Python worker, which commits a remote stream's batches)."""
    wanted = os.environ.get("RIVC_FAULT")
    return {"RIVC_FAULT": wanted} if wanted else {}


def armed(point: str, node: str = "") -> bool:
    """Whether RIVC_FAULT names this point (and, when it names one, this node)."""
    wanted = os.environ.get("RIVC_FAULT")
    if not wanted:
        return False
    name, _, only = wanted.partition(":")
    return name == point and (not only or only == node)


def fault(point: str, node: str = "") -> None:
    """Die here if RIVC_FAULT names this point (and, when it names one, this node)."""
    if armed(point, node):
        os.kill(os.getpid(), signal.SIGKILL)
