-- ConfirmHold in one statement, so that the counter stripe it moves (for a
-- general-admission section, the section's only counter row) is locked
-- from its update to the commit inside Postgres, never across a round
-- trip to the service.
--
-- Locks in the order every transaction takes them (idempotency key, hold
-- row, the customer's lock when the hold has lapsed, seats by ascending
-- id, counter stripes in ascending order): HELD -> CONFIRMED, seats SOLD,
-- counters moved, an outbox row. The first answer for a key, a hold or an
-- error, is stored with the key and replayed; a twin in flight waits on
-- the key's row.
--
-- Answers (outcome, in_flight, key_reused): outcome is the stored answer,
-- {"hold": {...}} or {"error": {"outcome", "metadata"}} where outcome names
-- what stopped the confirm (HOLD_NOT_FOUND, HOLD_ALREADY_CONFIRMED,
-- HOLD_EXPIRED, HOLD_SEATS_TAKEN, AMOUNT_MISMATCH, TICKET_LIMIT_REACHED)
-- and the service owns the code, reason and message of each (answers
-- stored before outcomes had names carry the code, reason and message
-- themselves). in_flight or key_reused say that there is no answer to
-- give (the key's first confirmation has none yet, or was for another
-- hold, payment or amount). p_timeout_ms bounds the lock waits.
--
-- The ticket limit: confirming a live hold moves seats the customer holds
-- to seats they bought, and booking_hold_seats counted them when it made
-- the hold. A lapsed hold is not counted (the customer may have held
-- others since), so paying for it late must fit the limit again: under the
-- customer's lock (the one booking_hold_seats takes), what they bought (and
-- received by claimed transfers, less what they gave, as booking_hold_seats
-- counts it) plus their live holds plus this one stay within the event's
-- max_tickets_per_customer (max_seats_per_customer when NULL), or the
-- confirm fails TICKET_LIMIT_REACHED (metadata hold_id, limit, held,
-- bought) and the payment refunds; the lapsed hold is left to the sweeper.

-- p_traceparent is the confirm's trace context, kept with its outbox row
-- (NULL: none; a replica of the previous release passes seven arguments).
-- The seven-argument function it replaces goes in the same transaction.
DROP FUNCTION IF EXISTS booking_confirm_hold(uuid, text, text, bigint, text, timestamptz, integer);

CREATE OR REPLACE FUNCTION booking_confirm_hold(
    p_hold_id      uuid,
    p_key          text,
    p_payment_id   text,
    p_amount_minor bigint,
    p_currency     text,
    p_now          timestamptz,
    p_timeout_ms   integer,
    p_traceparent  text DEFAULT NULL
) RETURNS TABLE (outcome jsonb, in_flight boolean, key_reused boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_prior   confirmations%ROWTYPE;
    v_hold    holds%ROWTYPE;
    v_seats   bigint[];
    v_sold    bigint[] := '{}';
    v_error   jsonb;
    v_limit   integer;
    v_held    integer;
    v_bought  integer;
    v_outcome jsonb;
BEGIN
    PERFORM set_config('lock_timeout', GREATEST(p_timeout_ms, 1)::text, true);

    -- The key: a twin in flight holds it (the insert waits for it).
    INSERT INTO confirmations (idempotency_key, hold_id, payment_id, amount_minor, currency)
    VALUES (p_key, p_hold_id, p_payment_id, p_amount_minor, p_currency)
    ON CONFLICT (idempotency_key) DO NOTHING;
    IF NOT FOUND THEN
        SELECT * INTO v_prior FROM confirmations c WHERE c.idempotency_key = p_key;
        IF v_prior.outcome IS NULL THEN
            RETURN QUERY SELECT NULL::jsonb, true, false;
        ELSIF (v_prior.hold_id, v_prior.payment_id, v_prior.amount_minor, v_prior.currency)
              IS DISTINCT FROM (p_hold_id, p_payment_id, p_amount_minor, p_currency) THEN
            RETURN QUERY SELECT NULL::jsonb, false, true;
        ELSE
            RETURN QUERY SELECT v_prior.outcome, false, false;
        END IF;
        RETURN;
    END IF;

    SELECT * INTO v_hold FROM holds h WHERE h.hold_id = p_hold_id FOR UPDATE;
    IF NOT FOUND THEN
        v_error := jsonb_build_object(
            'outcome', 'HOLD_NOT_FOUND', 'metadata', jsonb_build_object('hold_id', p_hold_id::text));
    ELSIF v_hold.state = 'CONFIRMED' THEN
        IF v_hold.payment_id IS DISTINCT FROM p_payment_id THEN
            v_error := jsonb_build_object(
                'outcome', 'HOLD_ALREADY_CONFIRMED', 'metadata', jsonb_build_object('hold_id', p_hold_id::text));
        END IF;
    ELSIF v_hold.state <> 'HELD' THEN
        v_error := jsonb_build_object(
            'outcome', 'HOLD_EXPIRED',
            'metadata', jsonb_build_object('hold_id', p_hold_id::text, 'state', v_hold.state));
    ELSIF (p_amount_minor, p_currency) IS DISTINCT FROM (v_hold.amount_minor, v_hold.currency) THEN
        v_error := jsonb_build_object(
            'outcome', 'AMOUNT_MISMATCH',
            'metadata', jsonb_build_object(
                'expected_amount_minor', v_hold.amount_minor::text, 'expected_currency', v_hold.currency,
                'paid_amount_minor', p_amount_minor::text, 'paid_currency', p_currency));
    ELSE
        IF v_hold.expires_at <= p_now THEN
            PERFORM pg_advisory_xact_lock(hashtext('booking.customer.' || v_hold.event_id),
                                          hashtext(v_hold.customer_id));
            SELECT COALESCE(e.max_tickets_per_customer, e.max_seats_per_customer) INTO v_limit
              FROM events e WHERE e.event_id = v_hold.event_id;
            SELECT t.held, t.bought INTO v_held, v_bought
              FROM booking_customer_tickets(v_hold.event_id, v_hold.customer_id, p_now) t;
            IF v_bought + v_held + v_hold.quantity > v_limit THEN
                v_error := jsonb_build_object(
                    'outcome', 'TICKET_LIMIT_REACHED',
                    'metadata', jsonb_build_object(
                        'hold_id', p_hold_id::text, 'limit', v_limit::text, 'held', v_held::text,
                        'bought', v_bought::text));
            END IF;
        END IF;
        -- A lapsed hold is still confirmed when every seat is still its own
        -- (no one reclaimed any, and the sweeper has not ended it): the
        -- customer paid and nobody else lost anything. Otherwise it is over:
        -- whatever it still has goes back on sale and the payment refunds.
        SELECT array_agg(hs.seat_id ORDER BY hs.seat_id) INTO v_seats FROM hold_seats hs WHERE hs.hold_id = p_hold_id;
        IF v_error IS NULL AND v_seats IS NOT NULL THEN
            WITH mine AS MATERIALIZED (
                SELECT s.seat_id FROM seats s
                 WHERE s.event_id = v_hold.event_id AND s.seat_id = ANY (v_seats)
                   AND s.hold_id = p_hold_id AND s.status = 'HELD'
                 ORDER BY s.seat_id
                   FOR UPDATE
            ), sold AS (
                UPDATE seats s SET status = 'SOLD', hold_expires_at = NULL
                  FROM mine
                 WHERE s.event_id = v_hold.event_id AND s.seat_id = mine.seat_id
                   AND s.hold_id = p_hold_id AND s.status = 'HELD'
                RETURNING s.seat_id
            )
            SELECT COALESCE(array_agg(x.seat_id ORDER BY x.seat_id), '{}') INTO v_sold FROM sold x;
            IF cardinality(v_sold) < v_hold.quantity THEN
                UPDATE seats s SET status = 'AVAILABLE', hold_id = NULL, hold_expires_at = NULL
                 WHERE s.event_id = v_hold.event_id AND s.seat_id = ANY (v_sold) AND s.hold_id = p_hold_id;
                UPDATE holds h SET state = 'EXPIRED', ended_at = p_now WHERE h.hold_id = p_hold_id;
                IF cardinality(v_sold) > 0 THEN
                    PERFORM booking_move_counters(
                        booking_hold_moves(v_hold.event_id, v_hold.section_id, v_sold, 0, -1, 0));
                END IF;
                v_error := jsonb_build_object(
                    'outcome', 'HOLD_SEATS_TAKEN',
                    'metadata', jsonb_build_object('hold_id', p_hold_id::text, 'state', 'EXPIRED'));
            END IF;
        END IF;
        IF v_error IS NULL THEN
            UPDATE holds h SET state = 'CONFIRMED', confirmed_at = p_now, payment_id = p_payment_id
             WHERE h.hold_id = p_hold_id;
            INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, traceparent)
            SELECT gen_random_uuid(), 'booking', p_hold_id::text, 'BookingConfirmed',
                   jsonb_build_object(
                       'event_id', v_hold.event_id, 'hold_id', p_hold_id::text, 'customer_id', v_hold.customer_id,
                       'section_id', v_hold.section_id,
                       'seats', COALESCE((SELECT jsonb_agg(jsonb_build_object('seat_id', hs.seat_id, 'label', hs.label)
                                                           ORDER BY hs.seat_id)
                                            FROM hold_seats hs WHERE hs.hold_id = p_hold_id), '[]'::jsonb),
                       'quantity', v_hold.quantity, 'payment_id', p_payment_id,
                       'amount_minor', v_hold.amount_minor, 'currency', v_hold.currency),
                   p_traceparent;
            PERFORM booking_move_counters(
                booking_hold_moves(v_hold.event_id, v_hold.section_id, v_sold, v_hold.quantity, -1, 1));
        END IF;
    END IF;

    IF v_error IS NULL THEN
        SELECT jsonb_build_object('hold', jsonb_build_object(
                   'hold_id', d.hold_id::text, 'event_id', d.event_id, 'customer_id', d.customer_id,
                   'section_id', d.section_id, 'quantity', d.quantity, 'state', d.state, 'currency', d.currency,
                   'amount_minor', d.amount_minor, 'expires_at', d.expires_at, 'created_at', d.created_at,
                   'confirmed_at', d.confirmed_at, 'payment_id', d.payment_id,
                   'refund_amount_minor', d.refund_amount_minor,
                   'seats', COALESCE((SELECT jsonb_agg(jsonb_build_array(x.id, x.rw, x.num, x.lbl) ORDER BY x.id)
                                        FROM unnest(d.seat_ids, d.row_labels, d.seat_numbers, d.labels)
                                             AS x(id, rw, num, lbl)), '[]'::jsonb)))
          INTO v_outcome
          FROM hold_details d WHERE d.hold_id = p_hold_id;
    ELSE
        v_outcome := jsonb_build_object('error', v_error);
    END IF;
    UPDATE confirmations c SET outcome = v_outcome WHERE c.idempotency_key = p_key;
    RETURN QUERY SELECT v_outcome, false, false;
END;
$$;
