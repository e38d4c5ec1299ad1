"""Batch handlers in Python: one call for many messages, each message's effects its own.

A batch handler is built against the `batch-handler-state` (or `batch-handler-full`) world and
defines `handle_batch(self, msgs)`, returning one outcome per message, in order. What it does
for a message (outbox sends, state reads and writes, its result value, its HTTP requests'
idempotency keys) must be done while that message is selected, so that it commits with that
message alone. `each` selects each message in turn as it hands it over:

    class WitWorld(wit_world.WitWorld):
        def handle_batch(self, msgs):
            return [tally(msg) for msg in qhost_batch.each(msgs)]

An exception fails the whole call: every message in it is retried, each then alone, so one
message that raises every time reaches the dead-letter queue by itself.
"""

from wit_world.imports import batch_item


def each(msgs):
    """The batch's messages in order, each selected as it is handed over."""
    for index, msg in enumerate(msgs):
        batch_item.select(index)
        yield msg
