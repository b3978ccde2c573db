"""Where messages go: an SMTP relay (:class:`SmtpRelay`), or, on a laptop
with no relay set, ``.eml`` files in a folder (:class:`EmlFolder`). Both
are :class:`~mail_svc.ports.Relay`; :class:`~mail_svc.adapters.pace.SharedPace` paces either."""

from __future__ import annotations

import asyncio
import os
import ssl
from email.message import Message
from email.utils import parseaddr
from pathlib import Path

import aiosmtplib

from mail_svc.config import SmtpConfig
from mail_svc.ports import Relay, RelayBusy, RelayRefused


def _sender(message: Message) -> str:
    """The envelope's sender: the address of the message's From."""
    return parseaddr(str(message["From"]))[1]


def _wire(message: Message) -> bytes:
    """The message as it goes on the wire, with the policy it was made with
    (which folds no header that fits SMTP's line: a Message-ID stays one
    token), lines ending in CRLF."""
    return message.as_bytes(policy=message.policy.clone(linesep="\r\n"))


def _answer(err: aiosmtplib.SMTPResponseException) -> str:
    return f"{err.code} {err.message}".strip()


class SmtpRelay:
    """An SMTP relay, over a few kept connections (STARTTLS when the relay
    offers it on ``smtp://``, TLS throughout on ``smtps://``, AUTH when a
    password is set). A 4xx or a lost connection is :class:`RelayBusy`; a
    5xx, or the recipient refused, :class:`RelayRefused`."""

    def __init__(self, config: SmtpConfig, *, connections: int = 4) -> None:
        self._config = config
        self.name = config.name
        self._idle: asyncio.LifoQueue[aiosmtplib.SMTP] = asyncio.LifoQueue()
        self._slots = asyncio.Semaphore(max(1, connections))
        self._tls: ssl.SSLContext | None = None
        if config.ca_file:
            self._tls = ssl.create_default_context(cafile=config.ca_file)

    async def _connect(self) -> aiosmtplib.SMTP:
        config = self._config
        client = aiosmtplib.SMTP(
            hostname=config.host,
            port=config.port,
            use_tls=config.implicit_tls,
            start_tls=None,  # when offered
            tls_context=self._tls,
            timeout=config.timeout_seconds,
        )
        await client.connect()
        if config.username is not None and config.password is not None:
            await client.login(config.username, config.password)
        return client

    async def send(self, message: Message, recipient: str) -> None:
        async with self._slots:
            client: aiosmtplib.SMTP | None = None
            while not self._idle.empty():
                candidate = self._idle.get_nowait()
                if candidate.is_connected:
                    client = candidate
                    break
            try:
                if client is None:
                    client = await self._connect()
                errors, _ = await client.sendmail(_sender(message), [recipient], _wire(message))
            except aiosmtplib.SMTPRecipientsRefused as err:
                refused = err.recipients[0] if err.recipients else None
                self._keep(client)
                if refused is not None and 400 <= refused.code < 500:
                    raise RelayBusy(_answer(refused)) from None
                raise RelayRefused(_answer(refused) if refused else "recipient refused") from None
            except aiosmtplib.SMTPResponseException as err:
                self._keep(client)
                if 400 <= err.code < 500:
                    raise RelayBusy(_answer(err)) from None
                raise RelayRefused(_answer(err)) from None
            except (aiosmtplib.SMTPException, OSError) as err:
                await self._drop(client)
                raise RelayBusy(f"the relay cannot be reached: {type(err).__name__}: {err}") from None
            if errors:
                self._keep(client)
                raise RelayRefused("; ".join(f"{code} {text}" for code, text in errors.values()))
            self._keep(client)

    def _keep(self, client: aiosmtplib.SMTP | None) -> None:
        if client is not None and client.is_connected:
            self._idle.put_nowait(client)

    async def _drop(self, client: aiosmtplib.SMTP | None) -> None:
        if client is not None:
            client.close()

    async def close(self) -> None:
        while not self._idle.empty():
            client = self._idle.get_nowait()
            try:
                await client.quit()
            except (aiosmtplib.SMTPException, OSError):
                client.close()


class EmlFolder:
    """Keeps each message as ``<folder>/<time>-<Message-ID>.eml`` (the
    relay of `boxoffice up` when none is set). A resend of one message
    writes the same file again."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.name = str(folder)

    async def send(self, message: Message, recipient: str) -> None:
        identity = str(message["Message-ID"]).strip("<>").replace("/", "_")
        path = self.folder / f"{identity}.eml"
        data = bytes(message)
        await asyncio.to_thread(self._write, path, data)

    def _write(self, path: Path, data: bytes) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".eml.partial")
        partial.write_bytes(data)
        os.replace(partial, path)

    async def close(self) -> None:
        return None


def _compliance(smtp: SmtpRelay, folder: EmlFolder) -> tuple[Relay, Relay]:
    return smtp, folder
