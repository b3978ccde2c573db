"""The mailer's background work."""
