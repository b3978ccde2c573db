-- The W3C traceparent of the call that started the payment (StartPayment's
-- span), so that a provider's webhook about its charge, which arrives in a
-- trace of its own, is linked back to the fan's checkout. Empty: started
-- without a trace (or before this column).
ALTER TABLE payments ADD COLUMN traceparent text NOT NULL DEFAULT '';
