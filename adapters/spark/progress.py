"""How far each running node's Spark jobs are: tasks done of all, and on Spark Connect the bytes
read, for the live progress line of `rivc run` on a terminal.

A node's thread names the node before it runs (`enter`). Classic Spark: the node becomes the
thread's job group and the status tracker is polled by job group. Spark Connect: the server
reports the progress of an operation to the thread that runs it, and the handler files it
under that thread's node.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..util.sparkkind import is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Tasks:
    done: int
    total: int
    bytes_read: int | None = None  # Spark Connect only

    def text(self) -> str:
        from ..ops.report import human_bytes

        text = f"{self.done:,}/{self.total:,} tasks"
        if self.bytes_read:
            text += f", {human_bytes(self.bytes_read)} read"
        return text


class SparkProgress:
    def __init__(self) -> None:
        self.starting = False  # the run's SparkSession is being built (a JVM starts)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._reported: dict[str, Tasks] = {}  # Spark Connect: node -> its operation's progress
        self._tracker: Any = None  # classic: the SparkContext's status tracker

    def attach(self, spark: SparkSession) -> None:
        """Listen to `spark` (once, when the run's session starts)."""
        if is_connect(spark):
            spark.registerProgressHandler(self._on_connect)  # type: ignore[arg-type]
        else:
            self._tracker = spark.sparkContext.statusTracker()

    def enter(self, nid: str) -> None:
        """The calling thread runs `nid` from now on."""
        self._local.node = nid
        with self._lock:
            self._reported.pop(nid, None)

    def here(self, spark: SparkSession) -> None:
        """Before the calling thread uses `spark`: its jobs go to its node's job group."""
        nid = getattr(self._local, "node", None)
        if (
            nid is not None
            and self._tracker is not None
            and self._local.__dict__.get("group") != nid
        ):
            spark.sparkContext.setJobGroup(nid, nid)
            self._local.group = nid

    def _on_connect(
        self, stages: Any, inflight_tasks: int, operation_id: str | None, done: bool
    ) -> None:
        nid = getattr(self._local, "node", None)
        if nid is None:
            return
        stages = list(stages or ())
        tasks = Tasks(
            sum(s.num_completed_tasks for s in stages),
            sum(s.num_tasks for s in stages),
            sum(s.num_bytes_read for s in stages),
        )
        with self._lock:
            if done:
                self._reported.pop(nid, None)
            else:
                self._reported[nid] = tasks

    def describe(self, nid: str) -> str | None:
        """What the live line of `nid` says after its elapsed time."""
        if self.starting:
            return "starting Spark"
        tasks = self.of(nid)
        return tasks.text() if tasks is not None else None

    def of(self, nid: str) -> Tasks | None:
        """The tasks of `nid`'s running Spark jobs, or None when none runs (or none reported)."""
        if self._tracker is None:
            with self._lock:
                return self._reported.get(nid)
        done = total = 0
        try:
            for job in self._tracker.getJobIdsForGroup(nid):
                info = self._tracker.getJobInfo(job)
                if info is None or info.status != "RUNNING":
                    continue
                for sid in info.stageIds:
                    stage = self._tracker.getStageInfo(sid)
                    if stage is not None:
                        done += stage.numCompletedTasks
                        total += stage.numTasks
        except Exception:  # the JVM is going away (Ctrl-C); progress is not worth an error
            return None
        return Tasks(done, total) if total else None
