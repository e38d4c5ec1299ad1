# {{name}}: a qhost handler. qhost leases the message's idempotency key before this runs and
# remembers it once this acks, so a duplicate delivery never reaches it twice.
import wit_world
from wit_world.imports import log
from wit_world.imports.qhost_handler_types import Message, Outcome_Ack, Outcome_Reject


class WitWorld(wit_world.WitWorld):
    def handle(self, msg: Message):
        try:
            body = msg.body.decode()
        except UnicodeDecodeError:
            # Never retried: dead-lettered at once with this reason.
            return Outcome_Reject("the body is not UTF-8")
        log.write(log.Level.INFO, f"{{name}} handled `{body}` (key {msg.idempotency_key})")
        return Outcome_Ack()
