"""A real SMTP relay in the test process (aiosmtpd, with STARTTLS and AUTH
required), that keeps what it accepts and answers as a test scripts it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from boxoffice.tls import CertFiles

USER = "mailer"
PASSWORD = "relay-secret-7"


@dataclass
class Received:
    sender: str
    recipients: list[str]
    data: bytes

    def parsed(self) -> EmailMessage:
        parsed = message_from_bytes(self.data, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


@dataclass
class RelayState:
    """What the relay took, and the answers a test has it give next."""

    received: list[Received] = field(default_factory=list)
    # Answers to DATA, first first; empty: "250".
    data_answers: list[str] = field(default_factory=list)
    # Answers to RCPT TO, first first; empty: "250".
    rcpt_answers: list[str] = field(default_factory=list)
    logins: int = 0
    tls_sessions: int = 0
    # Set: the relay keeps a message it took and answers its 250 only once
    # this is set (a sender held between its send and what comes after).
    hold_data: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def messages(self) -> list[EmailMessage]:
        with self.lock:
            return [item.parsed() for item in self.received]


class _Handler:
    def __init__(self, state: RelayState) -> None:
        self._state = state

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        with self._state.lock:
            answer = self._state.rcpt_answers.pop(0) if self._state.rcpt_answers else "250 OK"
        if answer.startswith("250"):
            envelope.rcpt_tos.append(address)
        return answer

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        with self._state.lock:
            answer = self._state.data_answers.pop(0) if self._state.data_answers else "250 Message accepted"
            if answer.startswith("250"):
                assert isinstance(envelope.content, bytes)
                self._state.received.append(
                    Received(str(envelope.mail_from), list(envelope.rcpt_tos), envelope.content)
                )
                if session.ssl is not None:
                    self._state.tls_sessions += 1
            hold = self._state.hold_data
        if hold is not None and answer.startswith("250"):
            await asyncio.get_running_loop().run_in_executor(None, hold.wait, 60)
        return answer


def _authenticator(state: RelayState) -> Any:
    def check(server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any) -> AuthResult:
        ok = isinstance(data, LoginPassword) and data.login == USER.encode() and data.password == PASSWORD.encode()
        if ok:
            with state.lock:
                state.logins += 1
        return AuthResult(success=ok, handled=False)

    return check


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def smtp_relay(identity: CertFiles) -> Iterator[tuple[int, RelayState]]:
    """A relay on loopback that requires STARTTLS and AUTH (``USER`` /
    ``PASSWORD``); its port and its state."""
    state = RelayState()
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(str(identity.cert), str(identity.key))
    port = _free_port()
    controller = Controller(
        _Handler(state),
        hostname="127.0.0.1",
        port=port,
        tls_context=tls,
        require_starttls=True,
        auth_required=True,
        auth_require_tls=True,
        authenticator=_authenticator(state),
    )
    controller.start()
    try:
        yield port, state
    finally:
        controller.stop()
