"""Delivery: sink nodes, which batches a sink takes, a batch's transforms and dead letters, the write and its commit."""
