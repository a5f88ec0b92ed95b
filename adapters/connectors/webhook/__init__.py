"""HTTP webhooks: the webhook sink."""
