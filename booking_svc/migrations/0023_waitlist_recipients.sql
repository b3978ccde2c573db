-- The fan's verified address and language as the edge asserted them when
-- they joined the waiting list (NULL when it asserted none): the mailer
-- writes an offer to it, so a fan who never paid before still hears of it.
ALTER TABLE waitlist_entries
    ADD COLUMN notify_email    text,
    ADD COLUMN notify_language text;
