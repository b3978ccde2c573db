"""PaymentService: idempotent payments through a provider, signed and
deduplicated webhooks, refunds, and the ticket issuer that consumes booking's
outbox stream. :mod:`payment_svc.app` composes it."""
