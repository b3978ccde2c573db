"""The payment service's configuration, read from the environment."""

from __future__ import annotations

from dataclasses import dataclass

from boxoffice import secrets as secret_files
from boxoffice.config import ConfigError, Env
from boxoffice.secrets import DEV_WEBHOOK_SECRET, SecretSource

STREAM = "ticket-issued"


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    """How the sandbox provider behaves."""

    # How long a charge or refund takes to answer.
    delay_seconds: float
    # How long a "pm_card_timeout" charge hangs before it answers.
    hang_seconds: float
    # When such a charge settles (captured) at the provider.
    timeout_settle_seconds: float
    # How late webhooks leave, at most (each one a random delay up to this).
    webhook_delay_seconds: float
    # Probability that a webhook is delivered twice.
    webhook_duplicate_probability: float
    # Probability that a webhook is never delivered.
    webhook_drop_probability: float
    # "auto": a background task delivers; "manual": tests deliver.
    webhook_mode: str
    # Secret the sandbox signs with.
    signing_secret: str

    @classmethod
    def from_env(cls, env: Env, *, signing_secret: str) -> SandboxConfig:
        return cls(
            delay_seconds=env.number("BOXOFFICE_SANDBOX_DELAY_SECONDS", 0.05, minimum=0.0, maximum=60.0),
            hang_seconds=env.number("BOXOFFICE_SANDBOX_HANG_SECONDS", 30.0, minimum=0.0, maximum=600.0),
            timeout_settle_seconds=env.number("BOXOFFICE_SANDBOX_TIMEOUT_SETTLE_SECONDS", 2.0, minimum=0.0),
            webhook_delay_seconds=env.number("BOXOFFICE_SANDBOX_WEBHOOK_DELAY_SECONDS", 1.0, minimum=0.0),
            webhook_duplicate_probability=env.number(
                "BOXOFFICE_SANDBOX_WEBHOOK_DUPLICATE_PROBABILITY", 0.2, minimum=0.0, maximum=1.0
            ),
            webhook_drop_probability=env.number(
                "BOXOFFICE_SANDBOX_WEBHOOK_DROP_PROBABILITY", 0.0, minimum=0.0, maximum=1.0
            ),
            webhook_mode=env.choice("BOXOFFICE_SANDBOX_WEBHOOK_MODE", "auto", ("auto", "manual")),
            signing_secret=env.string("BOXOFFICE_SANDBOX_WEBHOOK_SECRET", signing_secret),
        )


PROVIDER = secret_files.PAYMENT_PROVIDER
SANDBOX = "sandbox"
STRIPE = "stripe"
STRIPE_SECRET_KEY = "BOXOFFICE_STRIPE_SECRET_KEY"


@dataclass(frozen=True, slots=True)
class StripeConfig:
    """How the Stripe provider reaches Stripe."""

    # The secret API key (sk_...), from BOXOFFICE_STRIPE_SECRET_KEY_FILE (or
    # the variable itself), re-read when the file changes.
    secret_key_source: SecretSource[str]
    # Stripe's API address (tests point it at a local server).
    api_base: str
    # The most retries Stripe's library makes of one request (fewer when
    # the call's deadline leaves no time for their back-off).
    max_network_retries: int
    # Longest wait for one HTTP request.
    request_timeout_seconds: float

    @classmethod
    def from_env(cls, env: Env) -> StripeConfig:
        api_base = env.string("BOXOFFICE_STRIPE_API_BASE", "https://api.stripe.com").rstrip("/")
        if not api_base.startswith(("https://", "http://")) or any(c.isspace() for c in api_base):
            raise ConfigError(f"BOXOFFICE_STRIPE_API_BASE={api_base!r} is not an http(s) URL")
        return cls(
            secret_key_source=secret_files.read_secret(env, STRIPE_SECRET_KEY, _stripe_key, default=None),
            api_base=api_base,
            max_network_retries=env.integer("BOXOFFICE_STRIPE_MAX_NETWORK_RETRIES", 2, minimum=0, maximum=10),
            request_timeout_seconds=env.number(
                "BOXOFFICE_STRIPE_REQUEST_TIMEOUT_SECONDS", 10.0, minimum=0.1, maximum=80.0
            ),
        )


@dataclass(frozen=True, slots=True)
class PaymentConfig:
    """Everything the payment processes read from the environment."""

    booking_addr: str
    # Every secret verifies webhooks (several during a rotation): from
    # BOXOFFICE_WEBHOOK_SECRETS or the file BOXOFFICE_WEBHOOK_SECRETS_FILE
    # names, re-read when it changes. Unset: the development secret (`boxoffice
    # up` on a laptop needs no setup; a process off the embedded stores refuses it).
    webhook_secret_source: SecretSource[tuple[str, ...]]
    webhook_tolerance_seconds: int
    # How far StartPayment pushes the hold's expiry out.
    hold_extension_seconds: int
    # Longest wait for one provider call.
    provider_timeout_seconds: float
    idempotency_retention_seconds: int
    # A request's idempotency key, and a provider webhook's delivery, is
    # leased for this long and renewed by its holder while the request runs:
    # a dead holder's claim is taken over once the lease lapses.
    idempotency_lease_seconds: float
    reconcile_interval_seconds: float
    # A payment or refund left unsettled this long is the reconciler's.
    reconcile_after_seconds: float
    stream: str
    consumer_batch_size: int
    consumer_block_ms: int
    # Entries of different orders a consumer handles at once.
    consumer_concurrency: int
    # A pending stream entry idle this long is claimed from its consumer.
    claim_idle_ms: int
    sandbox: SandboxConfig
    # Which provider takes the money: "sandbox" (no money; the default on a
    # laptop, and named explicitly on a staging mesh) or "stripe".
    provider: str
    # Set when the provider is Stripe.
    stripe: StripeConfig | None

    @property
    def webhook_secrets(self) -> tuple[str, ...]:
        """The webhook secrets now."""
        return self.webhook_secret_source.get()

    @classmethod
    def from_env(cls, env: Env) -> PaymentConfig:
        source = secret_files.read_secret(
            env, secret_files.WEBHOOK_SECRETS, _webhook_secrets, default=DEV_WEBHOOK_SECRET
        )
        secrets = source.get()
        provider = env.choice(PROVIDER, SANDBOX, (SANDBOX, STRIPE))
        return cls(
            booking_addr=env.grpc_target("BOXOFFICE_BOOKING_ADDR", "127.0.0.1:50052"),
            webhook_secret_source=source,
            webhook_tolerance_seconds=env.integer("BOXOFFICE_WEBHOOK_TOLERANCE_SECONDS", 300, minimum=1),
            hold_extension_seconds=env.integer(
                "BOXOFFICE_PAYMENT_HOLD_EXTENSION_SECONDS", 600, minimum=1, maximum=1800
            ),
            provider_timeout_seconds=env.number("BOXOFFICE_PROVIDER_TIMEOUT_SECONDS", 10.0, minimum=0.01),
            idempotency_retention_seconds=env.integer("BOXOFFICE_IDEMPOTENCY_RETENTION_SECONDS", 86_400, minimum=60),
            idempotency_lease_seconds=env.number(
                "BOXOFFICE_IDEMPOTENCY_LEASE_SECONDS", 3.0, minimum=0.3, maximum=600.0
            ),
            reconcile_interval_seconds=env.number("BOXOFFICE_RECONCILE_INTERVAL_SECONDS", 15.0, minimum=0.01),
            reconcile_after_seconds=env.number("BOXOFFICE_RECONCILE_AFTER_SECONDS", 60.0, minimum=0.0),
            stream=env.string("BOXOFFICE_TICKET_STREAM", STREAM),
            consumer_batch_size=env.integer("BOXOFFICE_CONSUMER_BATCH_SIZE", 100, minimum=1, maximum=10_000),
            consumer_block_ms=env.integer("BOXOFFICE_CONSUMER_BLOCK_MS", 1000, minimum=1, maximum=60_000),
            consumer_concurrency=env.integer("BOXOFFICE_CONSUMER_CONCURRENCY", 16, minimum=1, maximum=1000),
            claim_idle_ms=env.integer("BOXOFFICE_CONSUMER_CLAIM_IDLE_MS", 30_000, minimum=1),
            sandbox=SandboxConfig.from_env(env, signing_secret=secrets[0]),
            provider=provider,
            stripe=StripeConfig.from_env(env) if provider == STRIPE else None,
        )


def _webhook_secrets(text: str) -> tuple[str, ...]:
    """Secrets separated by commas or lines, each of 16 characters at least."""
    secrets = tuple(part.strip() for part in text.replace("\n", ",").split(",") if part.strip())
    if not secrets or any(len(secret) < 16 for secret in secrets):
        raise ConfigError("BOXOFFICE_WEBHOOK_SECRETS: every secret must be at least 16 characters")
    return secrets


def _stripe_key(text: str) -> str:
    key = text.strip()
    if not key.startswith(("sk_", "rk_")) or len(key) < 16 or any(c.isspace() for c in key):
        raise ConfigError(f"{STRIPE_SECRET_KEY}: a Stripe secret key starts with sk_ (or rk_, restricted)")
    return key
