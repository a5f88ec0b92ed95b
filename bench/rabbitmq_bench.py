"""The rabbitmq sink's rate: a table model of N rows (default 100,000) published by one `rivc run`
to a queue of the machine's RabbitMQ (127.0.0.1:5672, guest), beside the anchor: the same JSON
bodies published by a bare aio-pika loop with publisher confirms, 1,000 in flight (no ids, no
sent log, no commit). The queue is declared and deleted.

    python bench/rabbitmq_bench.py
    python bench/rabbitmq_bench.py --rows 1000000
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

sys.path.insert(0, str(Path(__file__).parent))
from extract_bench import measure  # noqa: E402
from sink_bench import MODEL  # noqa: E402

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


async def bare(queue: str, bodies: list[bytes]) -> float:
    import aio_pika

    conn = await aio_pika.connect(URL)
    channel = await conn.channel(publisher_confirms=True)
    await channel.declare_queue(queue, durable=True)
    started = time.perf_counter()
    window = []
    for body in bodies:
        message = aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
        window.append(channel.default_exchange.publish(message, queue))
        if len(window) >= 1000:
            await asyncio.gather(*window)
            window.clear()
    await asyncio.gather(*window)
    secs = time.perf_counter() - started
    await conn.close()
    return secs


async def delete(*queues: str) -> None:
    import aio_pika

    conn = await aio_pika.connect(URL)
    channel = await conn.channel()
    for q in queues:
        await channel.queue_delete(q)
    await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    rivc = str(Path(sys.executable).parent / "rivc")
    queue = f"rivc_bench_{secrets.token_hex(3)}"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "models").mkdir()
            (root / "sinks").mkdir()
            (root / "rivc_project.yml").write_text("name: mqbench\n")
            (root / "models/orders.sql").write_text(MODEL.format(rows=args.rows))
            (root / "sinks/out.yml").write_text(
                "sinks:\n  - {name: mq, from: orders, connector: rabbitmq,\n"
                f'     config: {{url: "{URL}", routing_key: {queue}, queue: {queue}}}}}\n'
            )
            wall, _ = measure([rivc, "run"], root)
            print(f"{args.rows:,} rows: whole run {wall:.1f} s")
            results = json.loads((root / "target/run_results.json").read_text())["results"]
            for r in results:
                if r["node"].startswith("sink:"):
                    secs = r["duration_s"]
                    print(f"  {r['node']:<16} {secs:6.1f} s {args.rows / secs:>10,.0f} rows/s")
            from deltalake import DeltaTable

            from rivc.adapters.connectors.files.formats import json_objects

            table = DeltaTable(str(root / "warehouse/orders")).to_pyarrow_table()
            bodies = [t.encode() for b in table.to_batches() for t in json_objects(b)]
            secs = asyncio.run(bare(queue + "_bare", bodies))
            print(f"  bare aio-pika     {secs:6.1f} s {args.rows / secs:>10,.0f} rows/s")
    finally:
        asyncio.run(delete(queue, queue + "_bare"))


if __name__ == "__main__":
    main()
