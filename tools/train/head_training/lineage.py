"""A head's lineage: the heads it continued from (`train_heads.py --init-from`) or averages (`average_heads.py`).

A record is a head's training record, or the part of it that a head made from it keeps:
`steps` and `seconds` (its own training, not its start's; an average's seconds are its members' summed and
its steps its longest-trained member's), `sequences`, and at most one of `continues` (the record of the head it
started from) and `average_of` (the records of the heads it averages).
"""

from __future__ import annotations

LINEAGE_KEYS = ("steps", "seconds", "sequences", "continues", "average_of")


def lineage_record(training: dict, checksum: str | None = None) -> dict:
    """What a head made from this one keeps of its training record (with the checksum of its weights)."""
    record = {key: training[key] for key in LINEAGE_KEYS if key in training}
    return record if checksum is None else {"checksum": checksum, **record}


def lineage_steps(record: dict) -> int:
    """Steps of training behind a head: its own and its start's; an average's, its longest-trained member's."""
    members = record.get("average_of")
    if members:
        return max(lineage_steps(member) for member in members)
    start = record.get("continues")
    return int(record.get("steps", 0)) + (lineage_steps(start) if start else 0)


def lineage_words(record: dict, earlier: tuple[dict, ...] = ()) -> str:
    """How a head was trained, in words: "12000 steps", "3000 steps continuing ...", "the average of ...".

    Members of an average are numbered once any of them has a lineage of its own; a member that continues an
    earlier member (`earlier`) names it by its number.
    """
    members = record.get("average_of")
    if members:
        if not any(_descends(member) for member in members):
            return f"the average of heads trained {' and '.join(str(m['steps']) for m in members)} steps"
        return "the average of " + " and ".join(f"({i + 1}) {lineage_words(member, tuple(members[:i]))}"
                                                for i, member in enumerate(members))
    start = record.get("continues")
    if start is None:
        return f"{record['steps']} steps"
    more = _more_data_words(record, start)
    for number, member in enumerate(earlier, start=1):
        if member["checksum"] == start["checksum"]:
            return f"head ({number}) trained {record['steps']} steps more{more}"
    start_words = lineage_words(start) if _descends(start) else f"a head trained {start['steps']} steps"
    return f"{record['steps']} steps{more} continuing {start_words}"


def _descends(record: dict) -> bool:
    return "continues" in record or "average_of" in record


def _more_data_words(record: dict, start: dict) -> str:
    sequences, before = record.get("sequences"), start.get("sequences")
    return f" on {sequences} sequences" if sequences and before and sequences != before else ""
