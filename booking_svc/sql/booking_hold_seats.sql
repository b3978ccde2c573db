-- HoldSeats for one caller in one statement.

CREATE OR REPLACE FUNCTION booking_hold_seats(
    p_event_id      bigint,
    p_customer_id   text,
    p_seat_ids      bigint[],
    p_section_id    text,
    p_quantity      integer,
    p_hold_id       uuid,
    p_request_id    text,
    p_fingerprint   text,
    p_now           timestamptz,
    p_pause_seconds double precision,
    p_timeout_ms    integer
) RETURNS TABLE (
    hold_id uuid, event_id bigint, customer_id text, section_id text, quantity integer, state text,
    amount_minor bigint, currency text, expires_at timestamptz, created_at timestamptz,
    confirmed_at timestamptz, payment_id text, refund_amount_minor bigint,
    seat_ids bigint[], row_labels text[], seat_numbers integer[], labels text[], replayed boolean
)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_event      events%ROWTYPE;
    v_section    sections%ROWTYPE;
    v_prior      hold_requests%ROWTYPE;
    v_n          integer;
    v_expires    timestamptz;
    v_active     integer;
    v_count      integer;
    v_section_id text;
    v_wanted     bigint[];
    v_claimed    bigint[];
    v_missing    bigint[];
    v_freed      integer := 0;
    v_rows       text[];
    v_pick       bigint[];
    v_free       integer;
    v_lapsed_ids bigint[];
    v_stripe     record;
    v_deadline   timestamptz := clock_timestamp() + make_interval(secs => p_timeout_ms / 1000.0);
BEGIN
    -- The caller's deadline, enforced here: a lock wait past it fails, and a
    -- hold finished past it rolls back instead of committing for a caller
    -- that has given up.
    PERFORM set_config('lock_timeout', GREATEST(p_timeout_ms, 1)::text, true);
    SELECT * INTO v_event FROM events e WHERE e.event_id = p_event_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'event % does not exist', p_event_id USING ERRCODE = 'B1005';
    END IF;

    -- A retry with the same request id replays the first hold. A twin still
    -- in flight holds the key: this insert waits for it, then finds its row.
    IF p_request_id IS NOT NULL THEN
        INSERT INTO hold_requests (event_id, customer_id, request_id, fingerprint, hold_id)
        VALUES (p_event_id, p_customer_id, p_request_id, p_fingerprint, p_hold_id)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            SELECT * INTO v_prior FROM hold_requests r
             WHERE r.event_id = p_event_id AND r.customer_id = p_customer_id AND r.request_id = p_request_id;
            IF v_prior.fingerprint <> p_fingerprint THEN
                RAISE EXCEPTION 'request_id was used for another selection' USING ERRCODE = 'B1004';
            END IF;
            RETURN QUERY SELECT d.*, true FROM hold_details d WHERE d.hold_id = v_prior.hold_id;
            RETURN;
        END IF;
    END IF;

    v_n := COALESCE(cardinality(p_seat_ids), p_quantity);
    v_expires := p_now + make_interval(secs => v_event.hold_ttl_seconds);

    -- At most max_seats_per_customer seats in the customer's live holds: a
    -- rule over several rows, so the customer's holds are serialised here.
    PERFORM pg_advisory_xact_lock(hashtext('booking.customer.' || p_event_id), hashtext(p_customer_id));
    -- Planned afresh on every call (EXECUTE), on the table as it is now.
    EXECUTE $q$
        SELECT COALESCE(sum(h.quantity), 0)::integer FROM holds h
         WHERE h.event_id = $1 AND h.customer_id = $2 AND h.state = 'HELD' AND h.expires_at > $3
    $q$ INTO v_active USING p_event_id, p_customer_id, p_now;
    IF v_active + v_n > v_event.max_seats_per_customer THEN
        RAISE EXCEPTION 'customer would hold more than % seats', v_event.max_seats_per_customer
            USING ERRCODE = 'B1003', DETAIL = v_event.max_seats_per_customer || ',' || v_active;
    END IF;

    IF p_seat_ids IS NOT NULL THEN
        -- Explicit seats: they must exist and share one section.
        SELECT array_agg(w ORDER BY w) INTO v_missing
          FROM unnest(p_seat_ids) w
         WHERE NOT EXISTS (SELECT 1 FROM seats s WHERE s.event_id = p_event_id AND s.seat_id = w);
        IF v_missing IS NOT NULL THEN
            RAISE EXCEPTION 'unknown seats' USING ERRCODE = 'B1007', DETAIL = array_to_string(v_missing, ',');
        END IF;
        SELECT count(DISTINCT s.section_id), min(s.section_id) INTO v_count, v_section_id
          FROM seats s WHERE s.event_id = p_event_id AND s.seat_id = ANY (p_seat_ids);
        IF v_count > 1 THEN
            RAISE EXCEPTION 'seats of several sections' USING ERRCODE = 'B1008';
        END IF;
        SELECT * INTO v_section FROM sections sc WHERE sc.event_id = p_event_id AND sc.section_id = v_section_id;
        v_wanted := p_seat_ids;
    ELSE
        SELECT * INTO v_section FROM sections sc WHERE sc.event_id = p_event_id AND sc.section_id = p_section_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'unknown section' USING ERRCODE = 'B1006', DETAIL = p_section_id;
        END IF;
        IF v_section.kind = 'SEATED' THEN
            -- Best available: the lowest free seats that no concurrent picker
            -- is looking at (SKIP LOCKED, on the partial index of available
            -- seats), then lapsed holds; adjacent seats of one row when the
            -- window has them.
            SELECT array_agg(q.seat_id ORDER BY q.seat_id), array_agg(q.row_label ORDER BY q.seat_id)
              INTO v_wanted, v_rows
              FROM (SELECT s.seat_id, s.row_label FROM seats s
                     WHERE s.event_id = p_event_id AND s.section_id = p_section_id AND s.status = 'AVAILABLE'
                     ORDER BY s.seat_id
                     LIMIT p_quantity * 3
                       FOR UPDATE SKIP LOCKED) q;
            IF COALESCE(cardinality(v_wanted), 0) < p_quantity THEN
                SELECT v_wanted || array_agg(q.seat_id ORDER BY q.seat_id), v_rows || array_agg(q.row_label ORDER BY q.seat_id)
                  INTO v_wanted, v_rows
                  FROM (SELECT s.seat_id, s.row_label FROM seats s
                         WHERE s.event_id = p_event_id AND s.section_id = p_section_id
                           AND s.status = 'HELD' AND s.hold_expires_at < p_now
                         ORDER BY s.seat_id
                         LIMIT p_quantity
                           FOR UPDATE SKIP LOCKED) q;
                SELECT array_agg(u.seat_id ORDER BY u.seat_id), array_agg(u.row_label ORDER BY u.seat_id)
                  INTO v_wanted, v_rows
                  FROM unnest(v_wanted, v_rows) AS u(seat_id, row_label);
            END IF;
            IF COALESCE(cardinality(v_wanted), 0) < p_quantity THEN
                SELECT count(*) INTO v_free FROM seats s
                 WHERE s.event_id = p_event_id AND s.section_id = p_section_id
                   AND (s.status = 'AVAILABLE' OR (s.status = 'HELD' AND s.hold_expires_at < p_now));
                IF v_free = 0 THEN
                    RAISE EXCEPTION 'section sold out' USING ERRCODE = 'B1002', DETAIL = '0';
                ELSIF v_free < p_quantity THEN
                    RAISE EXCEPTION 'not enough seats left' USING ERRCODE = 'B1009', DETAIL = v_free::text;
                END IF;
                RAISE EXCEPTION 'free seats are being taken by others' USING ERRCODE = 'B1010';
            END IF;
            v_pick := NULL;
            FOR i IN 1 .. cardinality(v_wanted) - p_quantity + 1 LOOP
                IF v_wanted[i + p_quantity - 1] - v_wanted[i] = p_quantity - 1
                   AND v_rows[i + p_quantity - 1] = v_rows[i] THEN
                    v_pick := v_wanted[i : i + p_quantity - 1];
                    EXIT;
                END IF;
            END LOOP;
            v_wanted := COALESCE(v_pick, v_wanted[1 : p_quantity]);
        END IF;
    END IF;

    IF v_section.kind = 'SEATED' THEN
        -- Lock the seats in ascending id order (crossed groups never
        -- deadlock), note which are lapsed holds (already counted as held),
        -- then the conditional UPDATE: a seat is taken only if it is
        -- available or its hold has lapsed, re-checked on the row's newest
        -- version.
        SELECT COALESCE(array_agg(l.seat_id) FILTER (WHERE l.status = 'HELD' AND l.hold_expires_at < p_now),
                        '{}'::bigint[])
          INTO v_lapsed_ids
          FROM (SELECT s.seat_id, s.status, s.hold_expires_at FROM seats s
                 WHERE s.event_id = p_event_id AND s.seat_id = ANY (v_wanted)
                 ORDER BY s.seat_id
                   FOR UPDATE) l;
        WITH claimed AS (
            UPDATE seats s
               SET status = 'HELD', hold_id = p_hold_id, hold_expires_at = v_expires
             WHERE s.event_id = p_event_id AND s.seat_id = ANY (v_wanted)
               AND (s.status = 'AVAILABLE' OR (s.status = 'HELD' AND s.hold_expires_at < p_now))
            RETURNING s.seat_id, s.row_label, s.seat_number, s.label
        ), kept AS (
            INSERT INTO hold_seats (hold_id, event_id, seat_id, row_label, seat_number, label)
            SELECT p_hold_id, p_event_id, c.seat_id, c.row_label, c.seat_number, c.label FROM claimed c
            RETURNING hold_seats.seat_id
        )
        SELECT array_agg(k.seat_id ORDER BY k.seat_id) INTO v_claimed FROM kept k;
        IF COALESCE(cardinality(v_claimed), 0) < v_n THEN
            SELECT array_agg(w ORDER BY w) INTO v_missing
              FROM unnest(v_wanted) w WHERE w <> ALL (COALESCE(v_claimed, '{}'::bigint[]));
            RAISE EXCEPTION 'seats are taken' USING ERRCODE = 'B1001', DETAIL = array_to_string(v_missing, ',');
        END IF;
    END IF;

    INSERT INTO holds (hold_id, event_id, customer_id, section_id, quantity, state, amount_minor, currency,
                       expires_at, created_at)
    VALUES (p_hold_id, p_event_id, p_customer_id, v_section.section_id, v_n, 'HELD',
            v_section.price_minor * v_n, v_section.currency, v_expires, p_now);

    IF p_pause_seconds > 0 THEN
        PERFORM pg_sleep(LEAST(p_pause_seconds,
                               GREATEST(EXTRACT(EPOCH FROM v_deadline - clock_timestamp()), 0) + 0.01));
    END IF;

    -- The counters, last, so that their row locks last only until the
    -- commit: each stripe's sold + held + n <= capacity (and the CHECK
    -- behind it). A seat counts in stripe seat_id % 16; a lapsed hold's seat
    -- taken over is already counted as held. Stripes in ascending order.
    IF v_section.kind = 'SEATED' THEN
        FOR v_stripe IN
            SELECT (c % 16)::smallint AS stripe, count(*)::integer AS n
              FROM unnest(v_claimed) c
             WHERE c <> ALL (v_lapsed_ids)
             GROUP BY 1 ORDER BY 1
        LOOP
            UPDATE section_stripes st SET held = st.held + v_stripe.n
             WHERE st.event_id = p_event_id AND st.section_id = v_section.section_id AND st.stripe = v_stripe.stripe
               AND st.sold + st.held + v_stripe.n <= st.capacity;
            GET DIAGNOSTICS v_count = ROW_COUNT;
            IF v_count = 0 THEN
                RAISE EXCEPTION 'section sold out' USING ERRCODE = 'B1002', DETAIL = '0';
            END IF;
        END LOOP;
    ELSE
        UPDATE section_stripes st SET held = st.held + v_n
         WHERE st.event_id = p_event_id AND st.section_id = v_section.section_id AND st.stripe = 0
           AND st.sold + st.held + v_n <= st.capacity;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF v_count = 0 THEN
            -- Lazy expiry of general admission: lapsed holds of this section
            -- give their places back, then the counter is tried once more.
            WITH lapsed AS (
                SELECT h.hold_id, h.quantity FROM holds h
                 WHERE h.event_id = p_event_id AND h.section_id = v_section.section_id
                   AND h.state = 'HELD' AND h.expires_at < p_now
                 ORDER BY h.expires_at
                 LIMIT 100
                   FOR UPDATE SKIP LOCKED
            ), ended AS (
                UPDATE holds h SET state = 'EXPIRED', ended_at = p_now
                  FROM lapsed l WHERE h.hold_id = l.hold_id
                RETURNING l.quantity
            )
            SELECT COALESCE(sum(e.quantity), 0) INTO v_freed FROM ended e;
            IF v_freed > 0 THEN
                UPDATE section_stripes st SET held = st.held - v_freed + v_n
                 WHERE st.event_id = p_event_id AND st.section_id = v_section.section_id AND st.stripe = 0
                   AND st.sold + st.held - v_freed + v_n <= st.capacity;
                GET DIAGNOSTICS v_count = ROW_COUNT;
            END IF;
        END IF;
        IF v_count = 0 THEN
            SELECT GREATEST(st.capacity - st.sold - st.held, 0) INTO v_free
              FROM section_stripes st
             WHERE st.event_id = p_event_id AND st.section_id = v_section.section_id AND st.stripe = 0;
            IF v_free = 0 THEN
                RAISE EXCEPTION 'section sold out' USING ERRCODE = 'B1002', DETAIL = '0';
            END IF;
            RAISE EXCEPTION 'not enough places left' USING ERRCODE = 'B1009', DETAIL = v_free::text;
        END IF;
    END IF;

    IF clock_timestamp() > v_deadline THEN
        RAISE EXCEPTION 'hold took longer than its deadline' USING ERRCODE = 'query_canceled';
    END IF;
    RETURN QUERY SELECT d.*, false FROM hold_details d WHERE d.hold_id = p_hold_id;
END;
$$;
