"""What a sink takes at a run, decided from what its tables hold (docs/running.md, "What each
node reads").

Every destination of a sink (its own table, its routes', its dead letters') commits with its
data the place it reached in each input: the landed batch of a source, the batch id of a model.
At the next run the sink takes what is newer than that place, whatever happened in between: it
was not selected, it failed, a sibling failed, the process was killed, `.rivc/` was lost. A
pure planner: the runtime reads the places and the inputs' versions, then runs its steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rivc.compiler.errors import StateError

WHOLE = -1  # a place that means "take the whole input again" (`rivc state rewind --to start`)

Held = Mapping[str, int | None]


@dataclass(frozen=True)
class Step:
    """One batch a sink writes: for each changing input, the landed batches (after, upto] it
    reads (after None: from the first one, for a consumer that never took any), and the places
    it commits."""

    places: dict[str, int]
    ranges: dict[str, tuple[int | None, int]] = field(default_factory=dict)
    complete: bool = True  # the places describe everything the batch read


@dataclass(frozen=True)
class Landed:
    """What a changing input's landing table says: its newest complete batch, the batch ids it
    holds (oldest first), its first batch ever, and whether readers deduplicate it by key."""

    batch: int | None
    batches: tuple[int, ...] = ()
    base: int | None = None
    keyed: bool = False


def plan_steps(
    sink: str,
    kind: str,
    changing: list[str],
    versions: Mapping[str, int | None],
    landed: Mapping[str, Landed],
    held: Sequence[Held | None],
    untracked: bool,
    merging: bool,
) -> list[Step]:
    """The batches `sink` writes now; none when every destination holds everything.

    `versions`: each tracked input's newest version; `held`: what each destination holds (None
    for one that cannot record it: such a sink takes its whole input on every run)."""
    current = {k: v for k, v in versions.items() if v is not None}
    if kind != "batches" or any(h is None for h in held):
        everything = not untracked and all(h is not None for h in held)
        if everything and all(_has(h, current) for h in held if h is not None):
            return []
        return [Step(current, complete=everything)]
    places = [h for h in held if h is not None]
    for name in changing:
        for h in places:
            _check(sink, name, h.get(name), landed[name])
    # only the changing inputs' new batches make a step: a snapshot joined to them is read
    # whole by each step, and its own new versions bring nothing to deliver
    current = {n: v for n, v in current.items() if n in changing}
    if all(_has(h, current) for h in places):
        return []
    uniform = all(all(h.get(n) == places[0].get(n) for n in changing) for h in places[1:])
    ranges = {n: (_after(places[0].get(n)), landed[n].batch or 0) for n in changing}
    one_by_one = not uniform or (
        merging
        and any(
            not landed[n].keyed and len(_pending(landed[n], ranges[n][0])) > 1
            for n in changing
            if ranges[n][0] is not None
        )
    )
    if not one_by_one:
        live = {n: r for n, r in ranges.items() if landed[n].batch is not None}
        return [Step(current, live)]
    steps = []
    for name in changing:
        # a destination that never took this input (one added since) starts where the others
        # are; when none took it, from the first batch
        taken = [a for h in places if (a := _after(h.get(name))) is not None]
        low = min(taken, default=None)
        if low is None:
            upto = landed[name].batch
            if upto is None:
                continue
            steps.append(Step({name: upto}, _still(changing, name, places, (None, upto))))
            low = upto
        previous = low
        for batch in _pending(landed[name], low):
            steps.append(Step({name: batch}, _still(changing, name, places, (previous, batch))))
            previous = batch
    return steps


def _still(
    changing: list[str], name: str, places: list[Held], span: tuple[int | None, int]
) -> dict[str, tuple[int | None, int]]:
    """A step over one input: the others read nothing new (an empty range at a place)."""
    out: dict[str, tuple[int | None, int]] = {}
    for other in changing:
        if other == name:
            out[other] = span
        else:
            at = places[0].get(other)
            mark = 0 if at is None or at == WHOLE else at
            out[other] = (mark, mark)
    return out


def _after(place: int | None) -> int | None:
    return None if place is None or place == WHOLE else place


def _pending(landed: Landed, after: int | None) -> list[int]:
    return [b for b in landed.batches if (after is None or b > after) and b <= (landed.batch or 0)]


def _has(held: Held, current: Mapping[str, int]) -> bool:
    return all(
        held.get(k) is not None and held[k] != WHOLE and held[k] >= v  # type: ignore[operator]
        for k, v in current.items()
    )


def _check(sink: str, name: str, place: int | None, landed: Landed) -> None:
    """A place the landing table cannot have given: the table lost batches, or was re-created
    after the sink last took from it. Either way rows would be lost or doubled: refuse."""
    if place is None or place == WHOLE:
        return
    if landed.batch is None or place > landed.batch:
        raise StateError(
            f"sink {sink} holds batch {place} of {name}, but the source's landing table ends "
            f"at {landed.batch if landed.batch is not None else 'no batch'}: batches were lost "
            f"(a removed or restored table); restore it, or take the whole table again with "
            f"`rivc state rewind sink:{sink} --to start`"
        )
    if landed.base is not None and place < landed.base:
        raise StateError(
            f"sink {sink} holds batch {place} of {name}, from before its landing table was "
            f"re-created (its first batch is {landed.base}): batches it had not taken are "
            f"gone; take the whole table again with `rivc state rewind sink:{sink} --to start`"
        )


def describe(steps: list[Step]) -> dict[str, Any]:
    """For messages: how many landed batches the steps cover."""
    spans = [r for s in steps for r in s.ranges.values() if r[0] != r[1]]
    return {"steps": len(steps), "whole": any(r[0] is None for r in spans)}
