-- The fan's address and language live with the payment (payments.notify_email,
-- payments.notify_language, written at StartPayment from what the edge
-- asserted): the mailer reads them there, and keeps no copy of its own.
DROP TABLE mail_recipients;
