"""QueueService: the virtual waiting room on Redis, and its admitter.

``app`` builds everything (the composition root); ``servicer`` and
``converters`` are the gRPC face; ``handler`` holds the use cases over the
``ports``; ``adapters`` are the Redis queue store and the Postgres
waiting-room repository; ``jobs`` the admitter and the progress hub;
``errors`` every error the queue raises; ``lua/`` and ``migrations/`` the
scripts and schema.
"""
