"""The mailer: tickets delivered by e-mail, once per booking and message kind."""
