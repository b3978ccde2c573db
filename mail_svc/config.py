"""The mailer's settings, read and checked before it starts."""

from __future__ import annotations

from dataclasses import dataclass
from email.errors import HeaderParseError
from email.headerregistry import Address
from pathlib import Path
from urllib.parse import urlsplit

from boxoffice.config import ConfigError, Env
from boxoffice.embedded import default_data_dir

STREAM = "ticket-issued"
SMTP_URL = "BOXOFFICE_SMTP_URL"


@dataclass(frozen=True, slots=True)
class SmtpConfig:
    """A relay: ``smtp://host:port`` (STARTTLS when the relay offers it) or
    ``smtps://host:port`` (TLS from the first byte)."""

    host: str
    port: int
    implicit_tls: bool
    username: str | None
    # Read from BOXOFFICE_SMTP_PASSWORD_FILE (None: no AUTH).
    password: str | None
    # A CA file to verify the relay with (None: the system's).
    ca_file: str | None
    timeout_seconds: float

    @property
    def name(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def from_env(cls, env: Env, url: str) -> SmtpConfig:
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
            raise ConfigError(f"{SMTP_URL} must be smtp://host[:port] or smtps://host[:port], not {url!r}")
        try:
            port = parts.port or (465 if parts.scheme == "smtps" else 587)
        except ValueError:
            raise ConfigError(f"{SMTP_URL} names a port that is not a number") from None
        if parts.password:
            raise ConfigError(f"{SMTP_URL} carries no password: put it in BOXOFFICE_SMTP_PASSWORD_FILE")
        password: str | None = None
        password_file = env.optional_str("BOXOFFICE_SMTP_PASSWORD_FILE")
        if password_file:
            try:
                password = Path(password_file).read_text().strip()
            except OSError as err:
                raise ConfigError(f"BOXOFFICE_SMTP_PASSWORD_FILE cannot be read: {err.strerror}") from None
        username = env.optional_str("BOXOFFICE_SMTP_USER") or parts.username
        if password is not None and not username:
            raise ConfigError("BOXOFFICE_SMTP_PASSWORD_FILE needs a user (BOXOFFICE_SMTP_USER or the URL's)")
        return cls(
            host=parts.hostname,
            port=port,
            implicit_tls=parts.scheme == "smtps",
            username=username,
            password=password,
            ca_file=env.optional_str("BOXOFFICE_SMTP_CA_FILE"),
            timeout_seconds=env.number("BOXOFFICE_SMTP_TIMEOUT_SECONDS", 30.0, minimum=0.1, maximum=600.0),
        )


@dataclass(frozen=True, slots=True)
class MailConfig:
    # None: no relay (`boxoffice up` keeps .eml files in outbox_dir).
    smtp: SmtpConfig | None
    outbox_dir: Path
    mail_from: str
    # Messages per second handed to the relay by all the mailers together.
    rate_per_second: float
    # Where a message's link to the event's page (the tickets, a waiting-list
    # offer) points ({event_id} is filled in).
    tickets_url: str
    # Where a transfer's claim link points (the transfer and its secret follow in the fragment).
    claim_url: str
    # How often the mailer looks for new transfers to write to.
    transfer_interval_seconds: float
    # How often the mailer looks for new waiting-list offers to write to.
    offer_interval_seconds: float
    # Tries of one message within one handling while the relay says "later".
    busy_attempts: int
    busy_backoff_seconds: float
    # How long a confirmed booking waits for its tickets within one handling.
    tickets_wait_seconds: float
    stream: str
    consumer_batch_size: int
    consumer_block_ms: int
    consumer_concurrency: int
    claim_idle_ms: int
    # How often the resend sweep looks for deliveries due a send.
    sweep_seconds: float

    @classmethod
    def from_env(cls, env: Env) -> MailConfig:
        url = env.optional_str(SMTP_URL)
        mail_from = env.string("BOXOFFICE_MAIL_FROM", "boxoffice <tickets@boxoffice.localhost>")
        try:
            address = Address(addr_spec=addr_spec(mail_from))
        except (HeaderParseError, ValueError, IndexError):
            raise ConfigError(f"BOXOFFICE_MAIL_FROM is not an e-mail address: {mail_from!r}") from None
        if not address.domain:
            raise ConfigError(f"BOXOFFICE_MAIL_FROM has no domain: {mail_from!r}")
        tickets_url = env.string("BOXOFFICE_MAIL_TICKETS_URL", "http://127.0.0.1:8080/e/{event_id}")
        if not tickets_url.startswith(("https://", "http://")) or "{event_id}" not in tickets_url:
            raise ConfigError("BOXOFFICE_MAIL_TICKETS_URL must be an http(s) URL with {event_id} in it")
        claim_url = env.string("BOXOFFICE_MAIL_CLAIM_URL", "http://127.0.0.1:8080/claim")
        if not claim_url.startswith(("https://", "http://")) or "#" in claim_url:
            raise ConfigError("BOXOFFICE_MAIL_CLAIM_URL must be an http(s) URL without a fragment")
        return cls(
            smtp=SmtpConfig.from_env(env, url) if url else None,
            outbox_dir=default_data_dir(env.string("BOXOFFICE_DATA_DIR", ".boxoffice")) / "mail",
            mail_from=mail_from,
            rate_per_second=env.number("BOXOFFICE_MAIL_RATE", 50.0, minimum=0.01, maximum=100_000.0),
            tickets_url=tickets_url,
            claim_url=claim_url,
            transfer_interval_seconds=env.number(
                "BOXOFFICE_MAIL_TRANSFER_INTERVAL_SECONDS", 1.0, minimum=0.01, maximum=600.0
            ),
            offer_interval_seconds=env.number(
                "BOXOFFICE_MAIL_OFFER_INTERVAL_SECONDS", 1.0, minimum=0.01, maximum=600.0
            ),
            busy_attempts=env.integer("BOXOFFICE_MAIL_BUSY_ATTEMPTS", 4, minimum=1, maximum=20),
            busy_backoff_seconds=env.number("BOXOFFICE_MAIL_BUSY_BACKOFF_SECONDS", 0.5, minimum=0.0, maximum=60.0),
            tickets_wait_seconds=env.number("BOXOFFICE_MAIL_TICKETS_WAIT_SECONDS", 5.0, minimum=0.0, maximum=10.0),
            stream=env.string("BOXOFFICE_TICKET_STREAM", STREAM),
            consumer_batch_size=env.integer("BOXOFFICE_CONSUMER_BATCH_SIZE", 100, minimum=1, maximum=10_000),
            consumer_block_ms=env.integer("BOXOFFICE_CONSUMER_BLOCK_MS", 1000, minimum=1, maximum=60_000),
            consumer_concurrency=env.integer("BOXOFFICE_CONSUMER_CONCURRENCY", 16, minimum=1, maximum=1000),
            claim_idle_ms=env.integer("BOXOFFICE_CONSUMER_CLAIM_IDLE_MS", 30_000, minimum=1),
            sweep_seconds=env.number("BOXOFFICE_MAIL_SWEEP_SECONDS", 5.0, minimum=0.05, maximum=3600.0),
        )


def addr_spec(text: str) -> str:
    """The address of ``Name <addr>`` or of a bare address."""
    if "<" in text:
        return text[text.index("<") + 1 : text.rindex(">")]
    return text.strip()
