"""The mailer's adapters: its Postgres store and its relays."""
