"""The mailer's settings and templates: every template renders in every
language; the cluster's role refuses to start without a relay; bad relay
settings are clear errors; without a relay messages become .eml files."""

from __future__ import annotations

from datetime import UTC, datetime
from email import message_from_bytes, policy
from pathlib import Path

import pytest

from boxoffice.config import ConfigError, Env
from boxoffice_cli import main as cli
from mail_svc import app as mail_app
from mail_svc.adapters.relays import EmlFolder
from mail_svc.config import MailConfig
from mail_svc.model import LANGUAGES, BookingMail, Kind, TicketLine
from mail_svc.render import Renderer
from tests.mail.harness import FLIGHT
from tests.support import Stores, tls_environ

_BOOKING = BookingMail(
    hold_id="9b1d3c1e-6a43-4d9e-8d6f-7a5f0f1b2c3d",
    event=FLIGHT,
    tickets=(TicketLine(1, "TKT-0001", "ECO", "12A"), TicketLine(2, "TKT-0002", "ECO", "")),
    amount_minor=0,
    currency="VND",
)


# A booking's kinds (a transfer's message is tests/mail/test_transfer_mail.py's,
# a waiting-list offer's tests/mail/test_offer_mail.py's).
@pytest.mark.parametrize("kind", [kind for kind in Kind if kind not in (Kind.TRANSFER, Kind.OFFER)])
@pytest.mark.parametrize("language", LANGUAGES)
def test_every_template_renders_in_every_language(language: str, kind: Kind) -> None:
    renderer = Renderer(mail_from="Boxoffice <tickets@boxoffice.example>", tickets_url="https://x.example/e/{event_id}")
    message = renderer.render(
        _BOOKING,
        kind,
        language=language,
        to="fan@example.test",
        message_id="<m-1@boxoffice.example>",
        now=datetime.now(UTC),
    )
    parsed = message_from_bytes(bytes(message), policy=policy.default)
    assert parsed["Content-Language"] == language
    assert parsed["Message-ID"] == "<m-1@boxoffice.example>"
    subject = str(parsed["Subject"])
    assert "Zero-fare <flight>" in subject
    html = parsed.get_body(preferencelist=("html",))
    text = parsed.get_body(preferencelist=("plain",))
    assert html is not None and text is not None
    html_text, plain = html.get_content(), text.get_content()
    assert f'<html lang="{language}">' in html_text
    assert "Zero-fare &lt;flight&gt;" in html_text and "<flight>" not in html_text
    # 23:45 UTC on 1 May is 20:45 in São Paulo.
    assert "2027-05-01 20:45 (America/Sao_Paulo)" in plain
    assert "VJ123 SGN → GRU" in plain and "https://x.example/e/7" in html_text
    for code in ("TKT-0001", "TKT-0002"):
        assert code in plain and code in html_text
    images = [part for part in parsed.walk() if part.get_content_type() == "image/png"]
    if kind is Kind.TICKETS:
        assert [part["Content-ID"] for part in images] == ["<qr-1>", "<qr-2>"]
        assert 'src="cid:qr-1"' in html_text and 'src="cid:qr-2"' in html_text
    else:
        assert images == []


def test_a_language_without_templates_is_written_in_english() -> None:
    renderer = Renderer(mail_from="tickets@boxoffice.example", tickets_url="https://x.example/e/{event_id}")
    message = renderer.render(
        _BOOKING, Kind.TICKETS, language="fr", to="fan@example.test", message_id="<m@x>", now=datetime.now(UTC)
    )
    assert message["Content-Language"] == "en"


def _mailer_environ(stores: Stores, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": stores.database_url,
        "REDIS_URL": stores.redis_url,
        **tls_environ(stores.pki.files("issuer")),
        **extra,
    }


def test_the_mailer_refuses_to_start_without_a_relay(stores: Stores, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["mailer"], _mailer_environ(stores)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "BOXOFFICE_SMTP_URL" in err and err.startswith("boxoffice: configuration error:")


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"BOXOFFICE_SMTP_URL": "http://relay.example"}, "BOXOFFICE_SMTP_URL"),
        ({"BOXOFFICE_SMTP_URL": "smtp://u:pw@relay.example"}, "BOXOFFICE_SMTP_PASSWORD_FILE"),
        ({"BOXOFFICE_SMTP_URL": "smtp://relay.example:port"}, "port"),
        (
            {"BOXOFFICE_SMTP_URL": "smtp://relay.example", "BOXOFFICE_SMTP_PASSWORD_FILE": "/nonexistent/pw"},
            "cannot be read",
        ),
        ({"BOXOFFICE_SMTP_URL": "smtp://relay.example", "BOXOFFICE_MAIL_FROM": "nobody"}, "BOXOFFICE_MAIL_FROM"),
        ({"BOXOFFICE_SMTP_URL": "smtp://relay.example", "BOXOFFICE_MAIL_RATE": "0"}, "BOXOFFICE_MAIL_RATE"),
        ({"BOXOFFICE_SMTP_URL": "smtp://relay.example", "BOXOFFICE_MAIL_SWEEP_SECONDS": "0"}, "MAIL_SWEEP_SECONDS"),
        (
            {"BOXOFFICE_SMTP_URL": "smtp://relay.example", "BOXOFFICE_MAIL_TICKETS_URL": "ftp://x/{event_id}"},
            "TICKETS_URL",
        ),
    ],
)
def test_bad_relay_settings_are_clear_errors(settings: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        mail_app.check_settings(Env(settings))


def test_relay_urls() -> None:
    smtps = MailConfig.from_env(Env({"BOXOFFICE_SMTP_URL": "smtps://relay.example"})).smtp
    assert smtps is not None and smtps.implicit_tls and smtps.port == 465
    smtp = MailConfig.from_env(Env({"BOXOFFICE_SMTP_URL": "smtp://relay.example"})).smtp
    assert smtp is not None and not smtp.implicit_tls and smtp.port == 587


def test_without_a_relay_up_keeps_eml_files(tmp_path: Path) -> None:
    env = Env({"BOXOFFICE_DATA_DIR": str(tmp_path), mail_app.UP_ENV: "true"})
    mail_app.check_settings(env)
    config = MailConfig.from_env(env)
    assert config.smtp is None and config.outbox_dir == tmp_path / "mail"
    assert mail_app.banner(env) == f"{tmp_path / 'mail'} (no relay set)"


async def test_the_eml_folder_keeps_one_file_per_message(tmp_path: Path) -> None:
    renderer = Renderer(mail_from="tickets@boxoffice.example", tickets_url="https://x.example/e/{event_id}")
    message = renderer.render(
        _BOOKING, Kind.TICKETS, language="vi", to="fan@example.test", message_id="<m-9@x>", now=datetime.now(UTC)
    )
    folder = EmlFolder(tmp_path / "mail")
    await folder.send(message, "fan@example.test")
    await folder.send(message, "fan@example.test")  # a resend: the same file
    files = list((tmp_path / "mail").iterdir())
    assert [f.name for f in files] == ["m-9@x.eml"]
    parsed = message_from_bytes(files[0].read_bytes(), policy=policy.default)
    assert parsed["Content-Language"] == "vi"
