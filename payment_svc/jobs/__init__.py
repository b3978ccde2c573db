"""The payment service's background roles: the ticket issuer, the
reconciler, the cancellation refunds and the sandbox's webhook delivery."""
