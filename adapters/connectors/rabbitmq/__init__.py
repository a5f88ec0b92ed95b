"""RabbitMQ: the rabbitmq sink and source."""
