-- Idempotency keys of ConfirmPayment and RefundPayment stop being one
-- namespace for everyone (a call on a made-up payment id could store an
-- answer under a key a real customer used later). A key's scope becomes
-- '<method>/customer:<customer_id>' for a call on an existing payment, and
-- '<method>/payment:<payment_id>' for a call on an id no payment has.
--
-- A key stored before this change moves to the scope it would have now, so
-- that a retry of it still gets its first answer:
--   * ConfirmPayment: its fingerprint is its payment id's (sha256 of the
--     JSON array ["<payment_id>"]);
--   * RefundPayment: the refund it reserved (request_key 'request:<key>');
--   * an error answer: the payment id its metadata names.
-- What is left (claims still in flight, answers naming no payment) goes;
-- a retry of it answers anew.

UPDATE payment_idempotency_keys AS k
   SET scope = 'ConfirmPayment/customer:' || p.customer_id
  FROM payments AS p
 WHERE k.scope = 'ConfirmPayment'
   AND k.state = 'DONE'
   AND k.fingerprint = sha256(convert_to('["' || p.payment_id::text || '"]', 'UTF8'));

UPDATE payment_idempotency_keys AS k
   SET scope = 'RefundPayment/customer:' || p.customer_id
  FROM refunds AS r
  JOIN payments AS p USING (payment_id)
 WHERE k.scope = 'RefundPayment'
   AND k.state = 'DONE'
   AND r.source = 'REQUEST'
   AND r.request_key = 'request:' || k.key;

WITH named AS (
    SELECT scope, key,
           CASE WHEN status_code <> 0
                THEN convert_from(response, 'UTF8')::jsonb #>> '{metadata,payment_id}' END AS payment_id
      FROM payment_idempotency_keys
     WHERE scope IN ('ConfirmPayment', 'RefundPayment') AND state = 'DONE' AND status_code <> 0
)
UPDATE payment_idempotency_keys AS k
   SET scope = k.scope || coalesce('/customer:' || p.customer_id, '/payment:' || named.payment_id)
  FROM named
  LEFT JOIN payments AS p ON p.payment_id::text = named.payment_id
 WHERE k.scope = named.scope
   AND k.key = named.key
   AND named.payment_id IS NOT NULL;

DELETE FROM payment_idempotency_keys WHERE scope IN ('ConfirmPayment', 'RefundPayment');
