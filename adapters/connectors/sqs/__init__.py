"""Amazon SQS: the `sqs` source and sink."""
