// order-tally, in JavaScript: tallies orders, many per call (a batch handler, `handleBatch`).
//
// Each message is an order, {"order-id": "o-1", "customer": "c-17", "cents": 1250}. For each,
// selected in its turn (`select(i)` from qhost:handler/batch-item), the handler adds to two
// counters in its `tally` bucket, `orders` and `cents/CUSTOMER`, and sends one message to
// `tallied-queue` when it is configured. Each order's writes and message commit with that
// order's completion alone: an order that is retried or rejected adds nothing, one delivered
// twice adds once.
//
// For tests an order may carry "fail": "retry" (on its first delivery), "reject", or "throw"
// (an exception, which fails the whole call).
//
// Build: scripts/build-guest-plugins (componentize-js, against ../../wit's
// `batch-handler-state` world).

import { select } from "qhost:handler/batch-item@0.1.2";
import { get } from "qhost:handler/config@0.1.2";
import { write } from "qhost:handler/log@0.1.2";
import { send } from "qhost:handler/outbox@0.1.2";
import { increment } from "wasi:keyvalue/atomics@0.2.0-draft";
import { open } from "wasi:keyvalue/store@0.2.0-draft";

const text = new TextDecoder();
const bytes = new TextEncoder();

export function handleBatch(msgs) {
  write("info", `tallying ${msgs.length} orders`);
  const tally = open("tally");
  const queue = get("tallied-queue");
  return msgs.map((msg, i) => {
    // What follows is this message's: its writes and its outbox commit with it alone.
    select(i);
    return tallyOne(tally, queue, msg);
  });
}

function tallyOne(tally, queue, msg) {
  let order;
  try {
    order = JSON.parse(text.decode(msg.body));
  } catch (e) {
    return { tag: "reject", val: `not an order: ${e.message}` };
  }
  if (order.fail === "retry" && msg.receiveCount === 1) {
    return { tag: "retry", val: 0 };
  }
  if (order.fail === "reject") {
    return { tag: "reject", val: `order ${msg.idempotencyKey} refused` };
  }
  if (order.fail === "throw") {
    throw new Error(`order ${msg.idempotencyKey} cannot be tallied`);
  }
  increment(tally, "orders", 1n);
  increment(tally, `cents/${order.customer}`, BigInt(order.cents));
  if (queue !== undefined) {
    const note = { customer: order.customer, cents: order.cents, key: msg.idempotencyKey };
    send({
      queue,
      body: bytes.encode(JSON.stringify(note)),
      attributes: [],
      delaySeconds: 0,
      groupId: undefined,
    });
  }
  return { tag: "ack" };
}
