"""A postgres-cdc snapshot taken in parts (adapters/connectors/postgres/slot.py): each change is
judged by the snapshot of the part that read its key."""

from __future__ import annotations

from rivc.adapters.connectors.postgres.slot import Parts, Visibility

EARLY, LATE = Visibility.parse("100:100:"), Visibility.parse("150:200:150")
# keys up to ("b", 10) read early; the rest late (transaction 150 was running then)
PARTS = Parts(("text", "int"), (("b", 10), None), (EARLY, LATE))
KEY = [0, 1]


def row(region: str, id_: int) -> tuple[str, str, str]:
    return (region, str(id_), "v")  # as the log gives values: text


def test_the_part_that_read_a_key_decides_in_the_servers_order():
    assert PARTS.holds(120, ("b", "10")) is False  # read early: 120 came after
    assert PARTS.holds(120, ("b", "11")) is True  # read late: 120 is in it
    assert PARTS.holds(150, ("c", "1")) is False  # running when the late part was read
    assert PARTS.holds(120, ("B", "99")) is False  # "B" < "b" in C order: the early part
    assert PARTS.holds(120, ("b", 9)) is False and PARTS.holds(120, ("b", "9")) is False
    assert PARTS.everywhere(90) and not PARTS.everywhere(120)


def test_a_change_is_kept_unless_the_part_that_read_its_key_holds_it():
    assert PARTS.unread(120, KEY, "c", None, row("c", 1)) == ("", None, None)
    assert PARTS.unread(120, KEY, "c", None, row("a", 1)) == ("c", None, row("a", 1))
    assert PARTS.unread(120, KEY, "d", row("a", 1), None) == ("d", row("a", 1), None)
    assert PARTS.unread(120, KEY, "d", row("z", 1), None) == ("", None, None)
    assert PARTS.unread(150, KEY, "u", row("z", 1), row("z", 1))[0] == "u"  # neither part had it


def test_a_position_round_trips_and_one_from_before_parts_is_one_part():
    assert Parts.from_json({"lsn": 5, **PARTS.to_json()}) == PARTS
    old = Parts.from_json({"lsn": 5, "visibility": "100:100:"})
    assert old.uptos == (None,) and old.holds(99) and not old.holds(100)
    assert Parts(("uuid",), (), ()).key(["A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"]) == (
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    )
