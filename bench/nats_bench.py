"""The nats sink's and source's speed: a table model of N rows (default 200,000) published to a
JetStream stream by one `rivc run`, then read back by a nats source into a Delta table by a
second project; beside them, the anchor: the same payloads published by a bare nats-py
`publish_async` loop in one process (no Spark, no ids, no commit).

    python bench/nats_bench.py
    python bench/nats_bench.py --rows 1000000

Needs the NATS server with JetStream on 127.0.0.1:4222. Its streams and buckets are created and
dropped. Each node's duration comes from target/run_results.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path

import nats

sys.path.insert(0, str(Path(__file__).parent))
from extract_bench import measure  # noqa: E402
from sink_bench import MODEL  # noqa: E402

URL = "nats://127.0.0.1:4222"


def node_seconds(root: Path, prefix: str) -> list[tuple[str, float]]:
    results = json.loads((root / "target/run_results.json").read_text())["results"]
    return [(r["node"], r["duration_s"]) for r in results if r["node"].startswith(prefix)]


async def bare_publish(stream: str, payloads: list[bytes]) -> float:
    nc = await nats.connect(URL)
    js = nc.jetstream(publish_async_max_pending=4000)
    await js.add_stream(name=stream, subjects=[f"{stream.lower()}.x"])
    started = time.perf_counter()
    pending = []
    for p in payloads:
        pending.append(await js.publish_async(f"{stream.lower()}.x", p))
        if len(pending) >= 2000:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)
    secs = time.perf_counter() - started
    await nc.close()
    return secs


async def drop(*streams: str) -> None:
    nc = await nats.connect(URL)
    js = nc.jetstream()
    for name in streams:
        for gone in (js.delete_stream(name), js.delete_key_value(f"rivc_commits_{name}")):
            try:
                await gone
            except nats.js.errors.NotFoundError:
                pass
    await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args()
    rivc = str(Path(sys.executable).parent / "rivc")
    stream = f"RIVC_BENCH_{secrets.token_hex(3).upper()}"
    anchor = stream + "_ANCHOR"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out, back = Path(tmp) / "out", Path(tmp) / "back"
            for d in (out / "models", out / "sinks", back / "sources", back / "sinks"):
                d.mkdir(parents=True)
            (out / "rivc_project.yml").write_text("name: natsbench\n")
            (out / "models/orders.sql").write_text(MODEL.format(rows=args.rows))
            (out / "sinks/out.yml").write_text(
                "sinks:\n  - {name: published, from: orders, connector: nats,\n"
                f'     config: {{url: "{URL}", stream: {stream}, subject: bench.orders}}}}\n'
            )
            wall, _ = measure([rivc, "run"], out)
            print(f"{args.rows:,} rows published: whole run {wall:.1f} s")
            for node, secs in node_seconds(out, "sink:"):
                print(f"  {node:<22} {secs:6.1f} s {args.rows / secs:>10,.0f} rows/s")

            (back / "rivc_project.yml").write_text("name: natsback\n")
            (back / "sources/bus.yml").write_text(
                "sources:\n  - name: bus\n    connector: nats\n    tables:\n"
                "      - name: orders\n"
                f'        config: {{url: "{URL}", stream: {stream}, max_messages_per_trigger: 100000}}\n'
                "        columns: {order_id: bigint, customer_id: bigint, status: string,\n"
                "                  total: 'decimal(17,2)', created_at: timestamp, note: string}\n"
            )
            (back / "sinks/lake.yml").write_text(
                "sinks:\n  - {name: lake, from: source:bus.orders, connector: delta,\n"
                "     config: {table_uri: out/orders}}\n"
            )
            wall, _ = measure([rivc, "run"], back)
            print(f"{args.rows:,} rows read back into Delta: whole run {wall:.1f} s")
            for node, secs in node_seconds(back, "sink:"):
                print(f"  {node:<22} {secs:6.1f} s {args.rows / secs:>10,.0f} rows/s")

            from deltalake import DeltaTable

            from rivc.adapters.connectors.files.formats import json_objects

            table = DeltaTable(str(out / "warehouse/orders")).to_pyarrow_table()
            payloads = [
                text.encode() for batch in table.to_batches() for text in json_objects(batch)
            ]
            secs = asyncio.run(bare_publish(anchor, payloads))
            print(f"  bare publish_async     {secs:6.1f} s {args.rows / secs:>10,.0f} rows/s")
    finally:
        asyncio.run(drop(stream, anchor))


if __name__ == "__main__":
    main()
