"""Synthetic orders, users and pageviews as a PySpark Python data source, batch and streaming.

Every row is a pure function of (seed, index): a replayed offset range yields the same rows,
which is what lets a sink skip a replayed batch without losing or duplicating anything.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows

from rivc.compiler.loading.secrets import with_secrets
from rivc.compiler.sql import quote

from ...plane.base import SourceContext, register_data_source
from .spec import DatagenConfig, datagen_columns

NAME = "rivc_datagen"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # batch data starts here, so it never changes
PARTITION_ROWS = 50_000
BATCH_DEFAULT_EVENTS = 1_000  # a batch read of an unlimited generator takes this many

PRODUCTS = [
    ("keyboard", Decimal("49.90")),
    ("mouse", Decimal("19.90")),
    ("monitor", Decimal("229.00")),
    ("laptop stand", Decimal("39.50")),
    ("usb hub", Decimal("24.99")),
    ("headset", Decimal("89.00")),
    ("webcam", Decimal("59.95")),
    ("desk lamp", Decimal("34.00")),
]
STATUSES = ["pending", "paid", "shipped", "delivered", "cancelled"]
STATUS_WEIGHTS = [15, 30, 25, 25, 5]
FIRST = [
    "Ada",
    "Alan",
    "Grace",
    "Linus",
    "Barbara",
    "Ken",
    "Margaret",
    "Dennis",
    "Frances",
    "Edsger",
]
LAST = ["Lovelace", "Turing", "Hopper", "Torvalds", "Liskov", "Thompson", "Hamilton", "Ritchie"]
PAGES = ["/", "/products", "/products/{}", "/cart", "/checkout", "/account", "/search"]
REFERRERS = [None, "search", "social", "newsletter", "/", "/products"]
CUSTOMERS = 500  # customer and user ids are 1..500, so generated orders join generated users


@dataclass(frozen=True)
class Generator:
    pattern: str
    seed: int
    cdc: bool = False
    interval_us: int = 1_000_000  # between events: 1 / events_per_second
    base: datetime = EPOCH

    @classmethod
    def from_options(cls, options: dict[str, str]) -> Generator:
        cfg = DatagenConfig.model_validate(json.loads(options["config"]))
        return cls(
            cfg.pattern,
            seed_of(cfg),
            cfg.cdc_mode,
            int(1_000_000 / cfg.events_per_second) if cfg.events_per_second else 0,
        )

    def at(self, i: int) -> datetime:
        return self.base + timedelta(microseconds=i * self.interval_us)

    def row(self, i: int) -> tuple[Any, ...]:
        """The i-th event (0-based)."""
        if not self.cdc:
            return self._record(i, i + 1, self.at(i))
        # Each key sees an insert, then an update, then a delete (one in five) or a second update.
        key, step = divmod(i, 3)
        rnd = random.Random(f"{self.seed}:cdc:{i}")
        before = self._record(key, key + 1, self.at(3 * key)) if step else None
        if step == 2 and rnd.random() < 0.2:
            return ("delete", before, None, self.at(i))
        after = self._record(key + 1_000_000 * step, key + 1, self.at(3 * key))
        return ("insert" if step == 0 else "update", before, after, self.at(i))

    def _record(self, i: int, key: int, ts: datetime) -> tuple[Any, ...]:
        rnd = random.Random(f"{self.seed}:{self.pattern}:{i}")
        if self.pattern == "orders":
            product, price = PRODUCTS[rnd.randrange(len(PRODUCTS))]
            quantity = rnd.randint(1, 5)
            status = rnd.choices(STATUSES, STATUS_WEIGHTS)[0]
            return (key, rnd.randint(1, CUSTOMERS), product, quantity, price * quantity, status, ts)
        if self.pattern == "users":
            first, last = rnd.choice(FIRST), rnd.choice(LAST)
            email = f"{first}.{last}{key}@example.com".lower()
            return (key, f"{first} {last}", email, ts)
        page = rnd.choice(PAGES).format(rnd.randint(1, 100))
        return (page, rnd.randint(1, CUSTOMERS), ts, rnd.choice(REFERRERS))

    def rows(self, start: int, end: int) -> Iterator[tuple[Any, ...]]:
        for i in range(start, end):
            yield self.row(i)


def read(spark: Any, ctx: SourceContext[DatagenConfig]) -> Any:
    """The registry's entry point: a batch, or a stream when the config says `stream`."""
    cfg: DatagenConfig = ctx.config
    register_data_source(spark, DatagenSource)
    reader = spark.readStream if cfg.stream else spark.read
    return reader.format(NAME).option("config", with_secrets(cfg)).load()


def seed_of(cfg: DatagenConfig) -> int:
    """The configured seed, or one derived from stream_name: data is always reproducible."""
    if cfg.seed is not None:
        return cfg.seed
    return int.from_bytes(hashlib.blake2b(cfg.stream_name.encode(), digest_size=4).digest(), "big")


def schema_ddl(cfg: DatagenConfig) -> str:
    return ", ".join(f"{quote(k)} {v}" for k, v in datagen_columns(cfg).items())


class RangePartition(InputPartition):
    def __init__(self, start: int, end: int, base: float | None = None) -> None:
        super().__init__((start, end, base))
        self.start, self.end, self.base = start, end, base


def ranges(start: int, end: int, base: float | None = None) -> list[RangePartition]:
    step = PARTITION_ROWS
    return [RangePartition(s, min(s + step, end), base) for s in range(start, end, step)]


def _read(options: dict[str, str], partition: RangePartition) -> Iterator[tuple[Any, ...]]:
    gen = Generator.from_options(options)
    if partition.base is not None:
        gen = replace(gen, base=datetime.fromtimestamp(partition.base, UTC))
    return gen.rows(partition.start, partition.end)


class DatagenSource(DataSource):
    """`spark.read.format("rivc_datagen").option("config", json)`; readStream too."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return schema_ddl(DatagenConfig.model_validate(json.loads(self.options["config"])))

    def reader(self, schema: Any) -> DataSourceReader:
        return _BatchReader(dict(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _StreamReader(dict(self.options))


class _BatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        cfg = DatagenConfig.model_validate(json.loads(options["config"]))
        self.count = cfg.max_events or BATCH_DEFAULT_EVENTS

    def partitions(self) -> list[RangePartition]:
        return ranges(0, self.count) or [RangePartition(0, 0)]

    def read(self, partition: RangePartition) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        return _read(self.options, partition)


class _StreamReader(DataSourceStreamReader):
    """Offsets are {index, base}: events [start, end) timed from the stream's first start."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.cfg = DatagenConfig.model_validate(json.loads(options["config"]))

    def initialOffset(self) -> dict[str, Any]:
        return {"index": 0, "base": time.time()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        index, base = int(start["index"]), float(start["base"])
        eps, cap = self.cfg.events_per_second, self.cfg.max_events
        due = int((time.time() - base) * eps) if eps else (cap or index)
        if cap:
            due = min(due, cap)
        if isinstance(limit, ReadMaxRows):
            due = min(due, index + limit.max_rows)
        return {"index": max(index, due), "base": base}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RangePartition]:
        return ranges(int(start["index"]), int(end["index"]), float(start["base"]))

    def read(self, partition: RangePartition) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass
