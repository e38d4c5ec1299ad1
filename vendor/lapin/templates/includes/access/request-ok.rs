/// Server response to `access.request`, returning an access ticket (AMQP 0-8 compatibility, ignored by RabbitMQ).
