"""QueueService: the virtual waiting room on Redis, and its admitter."""
