/// Server confirmation that the queue-to-exchange binding has been created.
