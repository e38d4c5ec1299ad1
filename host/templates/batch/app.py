# {{name}}: a qhost batch handler. qhost gathers messages for it (up to its manifest's
# batch.max-messages), leases each one's idempotency key before this runs and remembers each
# that acks, so a duplicate delivery never reaches it twice. It returns one outcome per
# message, in order; each message then ends on its own (acked, retried, dead-lettered).
import qhost_batch
import wit_world
from wit_world.imports import log
from wit_world.imports.qhost_handler_types import Message, Outcome_Ack, Outcome_Reject


class WitWorld(wit_world.WitWorld):
    def handle_batch(self, msgs: list[Message]):
        log.write(log.Level.INFO, f"{{name}} got {len(msgs)} messages")
        # qhost_batch.each selects each message as it hands it over: what is done for it
        # (its outbox, state and result) commits with it alone.
        return [handle_one(msg) for msg in qhost_batch.each(msgs)]


def handle_one(msg: Message):
    try:
        body = msg.body.decode()
    except UnicodeDecodeError:
        # Never retried: dead-lettered at once with this reason.
        return Outcome_Reject("the body is not UTF-8")
    log.write(log.Level.INFO, f"{{name}} handled `{body}` (key {msg.idempotency_key})")
    return Outcome_Ack()
