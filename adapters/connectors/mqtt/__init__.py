"""MQTT: the mqtt source and its durable receiver."""
