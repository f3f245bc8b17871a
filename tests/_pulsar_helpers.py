"""Small helpers for tests that consume from a Pulsar broker."""

from __future__ import annotations

import threading

import pulsar

IDLE_MS = 1_500  # no message for this long means "nothing more is coming"


def drain(consumer: pulsar.Consumer, *, idle_ms: int = IDLE_MS) -> list[pulsar.Message]:
    """Receive and acknowledge until nothing arrives for `idle_ms`."""
    messages = []
    while True:
        try:
            message = consumer.receive(idle_ms)
        except pulsar.Timeout:
            return messages
        consumer.acknowledge(message)
        messages.append(message)


def numbers(messages: list[pulsar.Message]) -> list[int]:
    """The payloads of messages whose payload is a decimal number."""
    return [int(message.data()) for message in messages]


def drain_concurrently(consumers: list[pulsar.Consumer]) -> list[list[pulsar.Message]]:
    """`drain` every consumer at the same time, one thread each, as separate processors would."""
    received: list[list[pulsar.Message]] = [[] for _ in consumers]

    def consume(index: int) -> None:
        received[index] = drain(consumers[index])

    threads = [threading.Thread(target=consume, args=(index,)) for index in range(len(consumers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return received
