-- Where the payment's tickets are e-mailed, and in which language: the fan's
-- verified address and language as the edge asserted them at StartPayment
-- (NULL: none; the mailer then sends nothing and its delivery says so).
-- Read by the mailer; never logged.
ALTER TABLE payments
    ADD COLUMN notify_email text
        CONSTRAINT payments_notify_email_check CHECK (length(notify_email) BETWEEN 3 AND 254),
    ADD COLUMN notify_language text
        CONSTRAINT payments_notify_language_check CHECK (notify_language IN ('en', 'vi', 'pt-BR'));
