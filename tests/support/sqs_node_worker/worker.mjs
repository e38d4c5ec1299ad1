// The Node.js peer of the SQS client bench: the worker a team writes with bbc's sqs-consumer (the
// most used Node SQS consumer, on @aws-sdk/client-sqs) and node-redis. Receive ten; for each
// message take a lease with Redis `SET NX` on its message id, run the (trivial) handler when the
// lease is new and mark the key done; a duplicate whose key is taken is not run. The batch is
// returned to sqs-consumer, which deletes it with one DeleteMessageBatch.
//
// Usage: node worker.mjs ENDPOINT QUEUE REDIS_URL DELIVERIES KEY_PREFIX
//
// It consumes DELIVERIES messages and prints one JSON line: the CPU it used while consuming
// (user and system seconds, from `process.cpuUsage`, so start-up and module loading are left
// out), handled and duplicate counts, and its round trips to Redis. `scripts/install-test-tools`
// installs it with its locked dependencies under target/tools/node-worker.

import { SQSClient, GetQueueUrlCommand } from "@aws-sdk/client-sqs";
import { Consumer } from "sqs-consumer";
import { createClient } from "redis";

const [endpoint, queue, redisUrl, deliveriesArg, prefix] = process.argv.slice(2);
const deliveries = Number(deliveriesArg);

/** The trivial handler: the bench's plugin acks a body of `ack`. */
function handle(body) {
  return body === "ack";
}

const sqs = new SQSClient({
  endpoint,
  region: "us-east-1",
  credentials: { accessKeyId: "test", secretAccessKey: "test" },
});
const store = createClient({ url: redisUrl });
store.on("error", (err) => fail(`redis: ${err.message}`));
await store.connect();
await store.ping();
const { QueueUrl: queueUrl } = await sqs.send(new GetQueueUrlCommand({ QueueName: queue }));

let seen = 0;
let handled = 0;
let duplicates = 0;
let roundTrips = 0;

function fail(why) {
  process.stderr.write(`${why}\n`);
  process.exit(1);
}

const consumer = Consumer.create({
  queueUrl,
  sqs,
  batchSize: 10,
  waitTimeSeconds: 0,
  pollingWaitTimeMs: 0,
  handleMessageBatch: async (messages) => {
    for (const message of messages) {
      const key = `${prefix}:${message.MessageId}`;
      roundTrips += 1;
      if ((await store.set(key, "leased", { NX: true, EX: 300 })) === "OK") {
        if (!handle(message.Body)) {
          fail(`the handler refused ${JSON.stringify(message.Body)}`);
        }
        await store.set(key, "done", { EX: 86400 });
        roundTrips += 1;
        handled += 1;
      } else {
        duplicates += 1;
      }
    }
    seen += messages.length;
    return messages;
  },
});
consumer.on("error", (err) => fail(`sqs-consumer: ${err.message}`));
consumer.on("processing_error", (err) => fail(`processing: ${err.message}`));

const start = process.cpuUsage();
consumer.on("response_processed", async () => {
  if (seen < deliveries) {
    return;
  }
  const used = process.cpuUsage(start);
  consumer.stop();
  process.stdout.write(
    `${JSON.stringify({
      user: used.user / 1e6,
      system: used.system / 1e6,
      handled,
      duplicates,
      round_trips: roundTrips,
    })}\n`,
  );
  await store.quit();
  process.exit(0);
});
consumer.start();
