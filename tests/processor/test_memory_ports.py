"""The in-memory ports keep the broker semantics the exactly-once tests rely on."""

from __future__ import annotations

import pytest

from perfwatch.processor.memory import MemoryRecordTopic, MemoryVerdictSink
from perfwatch.processor.ports import PublisherBusy


def test_unacknowledged_and_negatively_acknowledged_records_come_back_counted() -> None:
    topic = MemoryRecordTopic(batch_size=2)
    for payload in (b"a", b"b", b"c"):
        topic.publish(payload, key="k")
    first = topic.source()
    first.open()
    a, b = first.receive_batch()
    first.acknowledge(a)
    first.negative_acknowledge(b)
    again, c = first.receive_batch()
    assert (again.payload, again.redelivery_count, c.payload) == (b"b", 1, b"c")
    first.close()  # neither settled: both redelivered to the next source
    second = topic.source()
    second.open()
    redelivered = second.receive_batch()
    assert [(m.payload, m.redelivery_count) for m in redelivered] == [(b"b", 2), (b"c", 1)]
    for message in redelivered:
        second.acknowledge(message)
    assert topic.unacknowledged() == [] and set(topic.acknowledgements.values()) == {1}


def test_one_publisher_per_name_until_it_closes() -> None:
    sink = MemoryVerdictSink()
    publisher = sink.open_publisher("p")
    with pytest.raises(PublisherBusy):
        sink.open_publisher("p")
    publisher.close()
    sink.open_publisher("p").close()


@pytest.mark.parametrize("deduplication", [True, False])
def test_deduplication_by_producer_and_sequence_id(deduplication: bool) -> None:
    sink = MemoryVerdictSink(deduplication=deduplication)
    publisher = sink.open_publisher("p")
    for sequence_id in (1, 2, 2, 1):
        publisher.send(b"v", key="k", properties={"verdict_id": "x"}, sequence_id=sequence_id)
    receipts = publisher.await_receipts(1.0)
    stored = [r is not None and r.position is not None for r in receipts]
    if deduplication:
        assert stored == [True, True, False, False] and publisher.last_sequence_id() == 2
    else:
        assert stored == [True] * 4 and publisher.last_sequence_id() == -1
    assert len(sink.verdicts) == sum(stored)


def test_read_back_finds_a_producers_verdicts_after_a_position() -> None:
    sink = MemoryVerdictSink()
    mine, theirs = sink.open_publisher("mine"), sink.open_publisher("theirs")
    for sequence_id, (publisher, verdict_id) in enumerate(
        [(mine, "a"), (theirs, "b"), (mine, "c"), (mine, "d")]
    ):
        publisher.send(
            b"v", key="k", properties={"verdict_id": verdict_id}, sequence_id=sequence_id
        )
    first = mine.await_receipts(1.0)[0]
    assert first is not None and first.position is not None
    assert sink.read_back("mine", None, {"a", "b", "c"}) == ({"a", "c"}, b"2")
    assert sink.read_back("mine", first.position, {"a", "b", "c", "d"}) == ({"c", "d"}, b"3")
