"""order-tally, in Python: tallies orders, many per call (a batch handler, `handle_batch`).

Each message is an order, {"order-id": "o-1", "customer": "c-17", "cents": 1250}. For each, in
its own turn (qhost_batch.each selects it), the handler adds to two counters in its `tally`
bucket, `orders` and `cents/CUSTOMER`, and sends one message to `tallied-queue` when it is
configured. Each order's writes and message commit with that order's completion alone: an
order that is retried or rejected adds nothing, one delivered twice adds once.

For tests an order may carry "fail": "retry" (on its first delivery), "reject", or "raise"
(an exception, which fails the whole call).

Build: scripts/build-guest-plugins (componentize-py, against ../../wit's
`batch-handler-state` world, with ../../guest-sdk/python on its path for qhost_batch).
"""

import json

import qhost_batch
import wit_world
from componentize_py_types import Err
from wit_world.imports import atomics, config, log, outbox, store
from wit_world.imports.types import Message, Outcome_Ack, Outcome_Reject, Outcome_Retry


class WitWorld(wit_world.WitWorld):
    def handle_batch(self, msgs: list[Message]):
        log.write(log.Level.INFO, f"tallying {len(msgs)} orders")
        tally = store.open("tally")
        queue = config.get("tallied-queue")
        return [tally_one(tally, queue, msg) for msg in qhost_batch.each(msgs)]


def tally_one(tally, queue, msg: Message):
    """Tallies one order (selected): its outcome."""
    try:
        order = json.loads(msg.body)
        customer, cents = order["customer"], int(order["cents"])
    except (ValueError, KeyError, TypeError) as e:
        return Outcome_Reject(f"not an order: {e}")
    fail = order.get("fail")
    if fail == "retry" and msg.receive_count == 1:
        return Outcome_Retry(0)
    if fail == "reject":
        return Outcome_Reject(f"order {msg.idempotency_key} refused")
    if fail == "raise":
        raise RuntimeError(f"order {msg.idempotency_key} cannot be tallied")
    atomics.increment(tally, "orders", 1)
    atomics.increment(tally, f"cents/{customer}", cents)
    if queue:
        note = {"customer": customer, "cents": cents, "key": msg.idempotency_key}
        try:
            outbox.send(outbox.Outgoing(queue, json.dumps(note).encode(), [], 0, None))
        except Err as e:
            return Outcome_Reject(f"cannot send to {queue}: {e.value}")
    return Outcome_Ack()
