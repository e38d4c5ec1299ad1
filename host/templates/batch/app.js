// {{name}}: a qhost batch handler. qhost gathers messages for it (up to its manifest's
// batch.max-messages), leases each one's idempotency key before this runs and remembers each
// that acks, so a duplicate delivery never reaches it twice. It returns one outcome per
// message, in order; each message then ends on its own (acked, retried, dead-lettered).
import { select } from "qhost:handler/batch-item@0.1.2";
import { write } from "qhost:handler/log@0.1.2";

const text = new TextDecoder("utf-8", { fatal: true });

export function handleBatch(msgs) {
  write("info", `{{name}} got ${msgs.length} messages`);
  return msgs.map((msg, i) => {
    // What follows is this message's: its outbox, state and result commit with it alone.
    select(i);
    return handleOne(msg);
  });
}

function handleOne(msg) {
  let body;
  try {
    body = text.decode(msg.body);
  } catch {
    // Never retried: dead-lettered at once with this reason.
    return { tag: "reject", val: "the body is not UTF-8" };
  }
  write("info", `{{name}} handled \`${body}\` (key ${msg.idempotencyKey})`);
  return { tag: "ack" };
}
