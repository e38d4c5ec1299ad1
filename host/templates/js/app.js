// {{name}}: a qhost handler. qhost leases the message's idempotency key before this runs and
// remembers it once this acks, so a duplicate delivery never reaches it twice.
import { write } from "qhost:handler/log@0.1.2";

const text = new TextDecoder("utf-8", { fatal: true });

export function handle(msg) {
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
