"""NATS JetStream: the nats sink and source."""
