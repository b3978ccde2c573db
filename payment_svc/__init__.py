"""PaymentService: idempotent payments, refunds, the outbox relay and the ticket issuer."""
