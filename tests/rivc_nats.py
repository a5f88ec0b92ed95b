"""The machine's NATS server with JetStream, for the nats sink and source tests: streams made,
read back with nats-py and dropped with the bucket of their sinks' commits."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import nats.js.errors
from nats.js.api import StreamConfig

URL = "nats://127.0.0.1:4222"


async def _js(work: Any) -> Any:
    nc = await nats.connect(URL)
    try:
        return await work(nc.jetstream())
    finally:
        await nc.close()


def js(work: Any) -> Any:
    return asyncio.run(_js(work))


def messages(stream: str) -> list[tuple[str, dict[str, str], Any]]:
    """(subject, headers, JSON payload) of every message the stream holds, in order."""

    async def work(j: Any) -> list[tuple[str, dict[str, str], Any]]:
        info = await j.stream_info(stream)
        if not info.state.messages:
            return []
        sub = await j.subscribe(">", stream=stream, ordered_consumer=True)
        out = []
        for _ in range(info.state.messages):
            m = await sub.next_msg(timeout=5)
            out.append((m.subject, dict(m.headers or {}), json.loads(m.data)))
        await sub.unsubscribe()
        return out

    result: list[tuple[str, dict[str, str], Any]] = js(work)
    return result


def drop_stream(name: str) -> None:
    """The stream and the bucket of its sinks' commits."""

    async def clean(j: Any) -> None:
        for drop in (j.delete_stream(name), j.delete_key_value(f"rivc_commits_{name}")):
            try:
                await drop
            except nats.js.errors.NotFoundError:
                pass

    js(clean)


def create_stream(name: str, subjects: list[str], window_s: float) -> None:
    js(
        lambda j: j.add_stream(
            StreamConfig(name=name, subjects=subjects, duplicate_window=window_s)
        )
    )
