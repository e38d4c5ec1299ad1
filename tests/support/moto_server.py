"""Starts moto's server (the tests' SQS- and S3-compatible server) with three corrections to its
SQS model: FIFO groups in order, receives and sends that do not count the whole queue, and
deletes that lose no concurrent send. Run by `tests/support/sqs_server.rs` with the Python that
`scripts/install-test-tools` installs moto into; arguments are moto_server's.

FIFO groups. moto 5.2.5 decides which message groups are locked once, when a receive starts, and decides
again only when it meets a visible message that was in flight. A long poll that began while a
group's message was in flight goes on skipping that group's next message after the first was
deleted, then decides again midway through the queue and hands out the group's *later*
messages: the group comes out of order. (Logged on a run of qhost's FIFO batch test: a receive
that started before order 6 of a group was deleted returned orders 8, 9 and 10 and left 7.)
SQS never hands out a message while an earlier one of its group is in flight or still waiting.

The replacement `receive_message` below is moto's own, with the group rule made SQS's: each pass
decides afresh, a group is locked while one of its messages is in flight (received and hidden),
and a group's message that cannot be handed out (hidden, delayed, or its group locked) holds
back the group's later messages in the same pass. Everything else (long polling, dead-letter
redrive, attribute filtering, retention) is moto's, unchanged in effect; the retention check
reads the queue's period directly, where moto's counted every message of the queue once per
message received (a receive cost the square of the queue's depth: 2,000 messages took minutes),
and `send_message` below is moto's with the same done for content-based deduplication.

And `Queue.delete_message` removes a message in place: moto's rebuilt the queue's list and
assigned it, losing any message sent to the queue meanwhile.

Deletes and visibility changes look for a receipt handle among the received messages first
(`_holders`), then in the whole queue: moto's walked the whole queue per entry, so a batch of
ten put-backs on a queue 5,000 deep cost 50,000 steps, and a host working through a deep
backlog spent its time waiting on the server rather than on its own work.
"""

import hashlib
import string
import sys
from copy import deepcopy

from moto.core.utils import unix_time, unix_time_millis
from moto.server import main
from moto.sqs import models


def receive_message(
    self,
    queue_name,
    count,
    wait_seconds_timeout,
    visibility_timeout,
    message_attribute_names=None,
):
    if message_attribute_names is None:
        message_attribute_names = []
    queue = self.get_queue(queue_name)
    result = []
    previous_result_count = 0
    polling_end = unix_time() + wait_seconds_timeout

    while True:
        if result or (wait_seconds_timeout and unix_time() > polling_end):
            break

        messages_to_dlq = []
        held = _groups_in_flight(queue)

        # A snapshot, as moto's own `queue.messages` is: a delete on another request's thread
        # removes from the list in place (below), which would make a live iteration skip the
        # message after the removed one (a FIFO group's next, handing out its later ones).
        for message in list(queue._messages):
            group = message.group_id if queue.fifo_queue else None
            if group is not None and group in held:
                continue
            if not message.visible or message.delayed:
                if group is not None:
                    held.add(group)
                continue
            # Visible again while pending: the consumer timed out.
            queue.pending_messages.discard(message)

            if (
                queue.dead_letter_queue is not None
                and queue.redrive_policy
                and message.approximate_receive_count
                >= queue.redrive_policy["maxReceiveCount"]
            ):
                messages_to_dlq.append(message)
                continue

            queue.pending_messages.add(message)
            message.mark_received(visibility_timeout=visibility_timeout)
            message_copy = deepcopy(message)
            models._filter_message_attributes(message_copy, message_attribute_names)
            if _past_retention(queue, message):
                break
            result.append(message_copy)
            if len(result) >= count:
                break

        for message in messages_to_dlq:
            queue._messages.remove(message)
            queue.dead_letter_queue.add_message(message)

        if previous_result_count == len(result):
            if wait_seconds_timeout == 0:
                break
            queue.wait_for_messages(1)
            continue

        previous_result_count = len(result)

    return result


def send_message(
    self,
    queue_name,
    message_body,
    message_attributes=None,
    delay_seconds=None,
    deduplication_id=None,
    group_id=None,
    system_attributes=None,
    validate_group_id=True,
):
    """moto's own, reading `ContentBasedDeduplication` directly where moto's built every
    attribute of the queue (counting its messages) to read it, once per message sent."""
    queue = self.get_queue(queue_name)
    self._validate_message(
        queue,
        message_body=message_body,
        delay_seconds=int(delay_seconds or 0),
        deduplication_id=deduplication_id,
        group_id=group_id,
        validate_group_id=validate_group_id,
    )
    if delay_seconds is not None:
        delay_seconds = int(delay_seconds)
    else:
        delay_seconds = queue.delay_seconds

    message = models.Message(str(models.random.uuid4()), message_body, system_attributes)
    if str(queue.content_based_deduplication).lower() == "true":
        message.deduplication_id = hashlib.sha256(message_body.encode("utf-8")).hexdigest()
    if deduplication_id is not None:
        message.deduplication_id = deduplication_id
        message.sequence_number = "".join(
            models.random.choice(string.digits) for _ in range(20)
        )
    if group_id is not None:
        message.group_id = group_id
    if message_attributes:
        message.message_attributes = message_attributes
    if delay_seconds > models.MAXIMUM_MESSAGE_DELAY:
        raise models.InvalidParameterValue(
            f"Value {delay_seconds} for parameter DelaySeconds is invalid. "
            "Reason: DelaySeconds must be >= 0 and <= 900."
        )
    message.mark_sent(delay_seconds=delay_seconds)
    queue.add_message(message)
    return message


def delete_message(self, receipt_handle):
    """moto's `Queue.delete_message`, removing the message from the queue's list in place:
    moto's builds a new list and assigns it, so a message sent to the queue meanwhile (another
    request's thread) was lost."""
    if receipt_handle in self.deleted_messages:
        return
    doomed = _holders(self, receipt_handle)
    if not doomed:
        raise models.ReceiptHandleIsInvalid()
    for message in doomed:
        self.pending_messages.discard(message)
        self.deleted_messages.update(message.all_receipt_handles)
        try:
            self._messages.remove(message)
        except ValueError:
            pass  # removed by a concurrent delete of the same message


def _holders(queue, receipt_handle):
    """The messages that had `receipt_handle`: among the received ones first (a handle is
    given by a receive, and a received message stays pending until it is received again or
    deleted), then the whole queue."""
    received = [m for m in list(queue.pending_messages) if m.had_receipt_handle(receipt_handle)]
    return received or [m for m in list(queue._messages) if m.had_receipt_handle(receipt_handle)]


def change_message_visibility(self, queue_name, receipt_handle, visibility_timeout):
    """moto's `SQSBackend.change_message_visibility`, finding the message with `_holders`."""
    queue = self.get_queue(queue_name)
    for message in _holders(queue, receipt_handle):
        given = unix_time_millis() + int(visibility_timeout) * 1000
        if given - message.sent_timestamp > 43200 * 1000:
            raise models.InvalidParameterValue(
                f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. Reason: "
                "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"
            )
        message.change_visibility(visibility_timeout)
        if message.visible:
            queue.pending_messages.discard(message)
        return
    raise models.ReceiptHandleIsInvalid


def _past_retention(queue, message):
    """moto's `is_message_valid_based_on_retention_period`, negated, reading the queue's period
    directly: moto's builds every attribute of the queue (counting its messages) to read one."""
    retain_until = int(queue.message_retention_period) + message.sent_timestamp / 1000
    return retain_until <= unix_time()


def _groups_in_flight(queue):
    """The FIFO groups with a message received and still hidden."""
    if not queue.fifo_queue:
        return set()
    return {
        m.group_id
        for m in list(queue.pending_messages)
        if m.group_id is not None and not m.visible
    }


models.SQSBackend.receive_message = receive_message
models.SQSBackend.send_message = send_message
models.Queue.delete_message = delete_message
models.SQSBackend.change_message_visibility = change_message_visibility

if __name__ == "__main__":
    sys.argv[0] = "moto_server"
    sys.exit(main())
