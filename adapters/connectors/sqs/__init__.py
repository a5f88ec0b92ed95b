"""Amazon SQS: the `sqs` sink."""
