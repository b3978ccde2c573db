-- A hold with its seats, as one row: what every hold read answers.
CREATE OR REPLACE VIEW hold_details AS
SELECT h.hold_id, h.event_id, h.customer_id, h.section_id, h.quantity, h.state,
       h.amount_minor, h.currency, h.expires_at, h.created_at, h.confirmed_at,
       h.payment_id, h.refund_amount_minor,
       COALESCE(x.seat_ids, '{}'::bigint[]) AS seat_ids,
       COALESCE(x.row_labels, '{}'::text[]) AS row_labels,
       COALESCE(x.seat_numbers, '{}'::integer[]) AS seat_numbers,
       COALESCE(x.labels, '{}'::text[]) AS labels
  FROM holds h
  LEFT JOIN LATERAL (
        SELECT array_agg(hs.seat_id ORDER BY hs.seat_id) AS seat_ids,
               array_agg(hs.row_label ORDER BY hs.seat_id) AS row_labels,
               array_agg(hs.seat_number ORDER BY hs.seat_id) AS seat_numbers,
               array_agg(hs.label ORDER BY hs.seat_id) AS labels
          FROM hold_seats hs
         WHERE hs.hold_id = h.hold_id
       ) x ON true;
