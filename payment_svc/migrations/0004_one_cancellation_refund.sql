-- A booking is cancelled once, so its payment has at most one refund for
-- the cancellation (RefundPayment of a confirmed booking reserves it, and
-- the BookingCancelled event that follows finds it): the last net under the
-- check the refund's reservation makes under the payment's row lock. A
-- failed one does not count, so that the refund can be asked again.
CREATE UNIQUE INDEX refunds_one_per_cancellation ON refunds (payment_id)
    WHERE source = 'BOOKING_CANCELLED' AND state <> 'FAILED';
