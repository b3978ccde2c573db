"""The payment service's adapters: its Postgres stores (payments and refunds,
idempotency keys, webhook deliveries, tickets), BookingService over gRPC, the
sandbox provider and the gRPC sink the sandbox delivers webhooks to. Each
implements a Protocol of :mod:`payment_svc.ports`."""
