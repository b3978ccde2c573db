"""The mailer's tests."""
