-- HoldSeats, the one hold path: every hold, alone or with the holds that
-- arrived with it, is decided here, in one statement (one round trip and
-- one commit for all of them). A lone hold is a batch of one.
--
-- p_requests holds one booking_hold_request per hold. They are decided one
-- after another, in the order given: a hold sees the seats, places and
-- customer totals of the holds before it. A hold that fails changes
-- nothing and does not fail the others: the holds are decided first, on
-- rows this statement has locked, and only the winners are written, all at
-- once, at the end, the counters last (booking_move_counters).
--
-- The rules, for each hold: a request id already used replays its first
-- hold (or fails REQUEST_ID_REUSED for another selection); the event must
-- exist (EVENT_NOT_FOUND); the customer's live holds plus this one stay
-- within the event's max_seats_per_customer (CUSTOMER_HOLD_LIMIT, detail
-- "limit,held"), and their tickets bought (confirmed holds, not
-- cancelled) plus their live holds plus this one within the event's ticket
-- limit, max_tickets_per_customer, or max_seats_per_customer when it is
-- NULL (TICKET_LIMIT_REACHED, detail "limit,held,bought"); the limit is
-- the customer's in the event, whatever session or token they hold with.
-- Both are read under the customer's lock, so two holds of one customer,
-- in one batch or in two calls, never both pass on one count. Explicit
-- seats must exist (UNKNOWN_SEAT, detail the ids), share one section
-- (SEATS_IN_SEVERAL_SECTIONS) and be free or held by a lapsed hold
-- (SEAT_UNAVAILABLE, detail the ids taken). While fans wait on the event's
-- waiting list for the section (or for any section), its seats are theirs:
-- every hold but the list's own offers fails SOLD_OUT (detail 0), and an
-- offer (offer_seconds set) lapses after that many seconds instead of the
-- event's hold time. Best available
-- takes the lowest free seats no concurrent picker is looking at (SKIP
-- LOCKED), then lapsed holds' seats, adjacent seats of one row when the
-- window has them (UNKNOWN_SECTION; SOLD_OUT, NOT_ENOUGH_SEATS with the
-- seats left as detail, SEATS_CONTENDED when free seats are locked by
-- others). A general-admission section is its counter, and lapsed holds of
-- the section give their places back when it is short.
--
-- Locks are taken class by class, each class in ascending order, in the
-- order the other transactions take them (request keys, customers, seats
-- by id, counter stripes), all before the first decision; after that the
-- function waits for nothing (best available skips locked seats), so no two
-- calls, and no call and another transaction, wait on each other in a
-- cycle.
--
-- Deadlines: timeout_ms of each request is what is left of its caller's
-- deadline. Lock waits end at the latest of them; a hold whose deadline
-- passes before it is decided fails alone (DEADLINE_EXCEEDED); when a
-- winner's deadline has passed once all is written, the statement fails
-- with message DEADLINE_EXCEEDED and the late holds' positions (1-based) in
-- DETAIL, rolling everything back, and the service sends the others again.
-- Any other error raised out of the function (none is expected) rolls
-- back the whole call. p_now is the service's clock for the whole call;
-- p_pause_seconds is a test hook (a sleep between claiming the seats and
-- moving the counters, to hold race windows open; 0 in production).
--
-- One row per hold, in the order given: idx (1-based), then either outcome
-- (the name of the rule it failed) with its detail, or the hold as
-- hold_details reads it and whether it was replayed.
--
-- Plans: every statement reads or writes rows by key, through an index. A
-- plan cached while a table was nearly empty would otherwise scan the
-- whole table, and keep doing so as it grows; so statements are planned
-- once per session, generically, with sequential scans ruled out. The
-- customer's live holds are the exception: several indexes of holds can
-- answer that query, and a generic plan made on a near-empty table may
-- settle on the index of every lapsing hold, so it is planned afresh on
-- each call (EXECUTE), where the planner sees the table as it is. The
-- same query sums what the customer bought (holds_customer finds both).
CREATE OR REPLACE FUNCTION booking_hold_seats(
    p_requests      booking_hold_request[],
    p_now           timestamptz,
    p_pause_seconds double precision
) RETURNS TABLE (
    idx integer, outcome text, detail text,
    hold_id uuid, event_id bigint, customer_id text, section_id text, quantity integer, state text,
    amount_minor bigint, currency text, expires_at timestamptz, created_at timestamptz,
    confirmed_at timestamptz, payment_id text, refund_amount_minor bigint,
    seat_ids bigint[], row_labels text[], seat_numbers integer[], labels text[], replayed boolean
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_n          integer := cardinality(p_requests);
    v_started    timestamptz := clock_timestamp();
    -- Per hold: NULL while undecided, then 'OK', 'REPLAY' (an earlier
    -- statement made it), 'TWIN' (an earlier hold of this batch with its
    -- request id made it) or the name of the outcome it fails with.
    h_status     text[];
    h_detail     text[];
    -- Holds with one request id form a group, named by its first hold;
    -- the group's winner (the first of them that wins, if any) and, for a
    -- twin, the hold it replays.
    h_group      integer[];
    h_winner     integer[];
    h_twin       integer[];
    h_prior      uuid[];
    h_offset     integer[];
    h_section    text[];
    h_n          integer[];
    h_amount     bigint[];
    h_currency   text[];
    h_expires    timestamptz[];
    h_seat_from  integer[];
    h_seat_count integer[];
    h_inserted   boolean[];
    -- The explicit seats of every hold, hold after hold (v_seat_ids, of
    -- events s_events; each hold's v_seat_counts of them from its
    -- h_offset), and their rows as read under lock (s_seats; a row of
    -- NULLs for a seat that does not exist).
    v_seat_ids    bigint[] := '{}';
    v_seat_counts integer[] := '{}';
    s_events     bigint[];
    s_seats      seats[];
    v_seat       seats;
    -- Events, sections, customers and general-admission counters, found by
    -- their key's position (e_ids, c_keys, u_keys, g_keys).
    e_ids        bigint[];
    e_rows       events[];
    c_keys       text[];
    c_rows       sections[];
    u_keys       text[];
    u_active     integer[];
    u_bought     integer[];
    g_keys       text[];
    g_events     bigint[];
    g_sections   text[];
    g_free       integer[];
    g_delta      integer[];
    -- What the winners take: their seats, hold after hold, and the keys
    -- (event/seat) of the seats this call has given away so far.
    o_seats      booking_taken_seat[] := '{}';
    o_keys       text[] := '{}';
    v_inserted   uuid[] := '{}';
    -- One hold at a time.
    req          booking_hold_request;
    v_e          integer;
    v_c          integer;
    v_u          integer;
    v_g          integer;
    v_k          integer;
    v_need       integer;
    v_limit      integer;
    v_section    text;
    v_ids        bigint[];
    v_rows       text[];
    v_numbers    integer[];
    v_labels     text[];
    v_lapsed     boolean[];
    v_bad        bigint[];
    v_taken      bigint[];
    v_pick       integer;
    v_free       integer;
    v_freed      integer;
    v_count      integer;
    v_first      integer;
    v_late       integer[];
    r            record;
BEGIN
    IF v_n IS NULL OR v_n = 0 THEN
        RETURN;
    END IF;
    h_status := array_fill(NULL::text, ARRAY[v_n]);
    h_detail := array_fill(NULL::text, ARRAY[v_n]);
    h_prior := array_fill(NULL::uuid, ARRAY[v_n]);
    h_offset := array_fill(0, ARRAY[v_n]);
    h_section := array_fill(NULL::text, ARRAY[v_n]);
    h_n := array_fill(0, ARRAY[v_n]);
    h_amount := array_fill(0::bigint, ARRAY[v_n]);
    h_currency := array_fill(NULL::text, ARRAY[v_n]);
    h_expires := array_fill(NULL::timestamptz, ARRAY[v_n]);
    h_seat_from := array_fill(1, ARRAY[v_n]);
    h_seat_count := array_fill(0, ARRAY[v_n]);
    h_inserted := array_fill(false, ARRAY[v_n]);
    h_group := array_fill(NULL::integer, ARRAY[v_n]);
    h_winner := array_fill(NULL::integer, ARRAY[v_n]);
    h_twin := array_fill(NULL::integer, ARRAY[v_n]);
    s_events := '{}';
    FOR i IN 1 .. v_n LOOP
        v_seat_counts := v_seat_counts || COALESCE(cardinality((p_requests[i]).seat_ids), 0);
        v_seat_ids := v_seat_ids || COALESCE((p_requests[i]).seat_ids, '{}');
        IF i > 1 THEN
            h_offset[i] := h_offset[i - 1] + v_seat_counts[i - 1];
        END IF;
        s_events := s_events || array_fill((p_requests[i]).event_id, ARRAY[v_seat_counts[i]]);
    END LOOP;

    -- Lock waits end at the latest caller's deadline; a hold whose own
    -- deadline passes meanwhile fails on its own below.
    PERFORM set_config('lock_timeout', GREATEST((SELECT max(t.timeout_ms) FROM unnest(p_requests) t), 1)::text, true);

    SELECT array_agg(e.event_id), array_agg(e)
      INTO e_ids, e_rows
      FROM events e WHERE e.event_id IN (SELECT r.event_id FROM unnest(p_requests) r);
    FOR i IN 1 .. v_n LOOP
        IF array_position(e_ids, (p_requests[i]).event_id) IS NULL THEN
            h_status[i] := 'EVENT_NOT_FOUND';
        END IF;
    END LOOP;

    -- Request ids. Each group claims its key, in key order (a twin still in
    -- flight in another transaction holds the key: the insert waits for
    -- it). A key an earlier statement holds makes each hold of the group a
    -- replay of that hold, or an error when it asks for another selection.
    -- A key claimed here goes to the group's first winner (decided below).
    IF EXISTS (SELECT 1 FROM unnest(p_requests) r WHERE r.request_id IS NOT NULL) THEN
        SELECT array_agg(f.grp ORDER BY f.i) INTO h_group
          FROM (SELECT u.ordinality AS i,
                       CASE WHEN u.request_id IS NULL THEN NULL
                            ELSE (min(u.ordinality) OVER (PARTITION BY u.event_id, u.customer_id, u.request_id))::integer
                       END AS grp
                  FROM unnest(p_requests) WITH ORDINALITY AS u) f;
        WITH mine AS (
            INSERT INTO hold_requests (event_id, customer_id, request_id, fingerprint, hold_id)
            SELECT u.event_id, u.customer_id, u.request_id, u.fingerprint, u.hold_id
              FROM unnest(p_requests) WITH ORDINALITY AS u
             WHERE h_group[u.ordinality] = u.ordinality AND h_status[u.ordinality] IS NULL
             ORDER BY 1, 2, 3
            ON CONFLICT DO NOTHING
            RETURNING hold_requests.hold_id
        )
        SELECT COALESCE(array_agg(m.hold_id), '{}') INTO v_inserted FROM mine m;
        FOR i IN 1 .. v_n LOOP
            h_inserted[i] := (p_requests[i]).hold_id = ANY (v_inserted);
        END LOOP;
        FOR r IN
            SELECT u.ordinality AS i, q.fingerprint, q.hold_id AS prior
              FROM unnest(p_requests) WITH ORDINALITY AS u
              JOIN hold_requests q ON q.event_id = u.event_id AND q.customer_id = u.customer_id
                                  AND q.request_id = u.request_id
             WHERE h_group[u.ordinality] IS NOT NULL AND h_status[u.ordinality] IS NULL
               AND (p_requests[h_group[u.ordinality]]).hold_id <> ALL (v_inserted)
        LOOP
            IF r.fingerprint <> (p_requests[r.i]).fingerprint THEN
                h_status[r.i] := 'REQUEST_ID_REUSED';
            ELSE
                h_status[r.i] := 'REPLAY';
                h_prior[r.i] := r.prior;
            END IF;
        END LOOP;
    END IF;

    -- Customers, in key order, then their live holds and what they bought
    -- (read after the lock: a hold or confirm of theirs that committed
    -- while this call waited is counted).
    PERFORM pg_advisory_xact_lock(k.a, k.b)
       FROM (SELECT DISTINCT hashtext('booking.customer.' || u.event_id) AS a, hashtext(u.customer_id) AS b
               FROM unnest(p_requests) WITH ORDINALITY AS u
              WHERE h_status[u.ordinality] IS NULL
              ORDER BY 1, 2
             OFFSET 0) k;
    -- Planned afresh on every call (EXECUTE), on the table as it is now.
    EXECUTE $q$
        SELECT array_agg(k.e || '/' || k.c), array_agg(t.held), array_agg(t.bought)
          FROM (SELECT DISTINCT u.event_id AS e, u.customer_id AS c
                  FROM unnest($1::booking_hold_request[]) WITH ORDINALITY AS u
                 WHERE ($2::text[])[u.ordinality] IS NULL) k
          CROSS JOIN LATERAL booking_customer_tickets(k.e, k.c, $3) t
    $q$ INTO u_keys, u_active, u_bought USING p_requests, h_status, p_now;

    -- Explicit seats, locked in ascending order, then read in request order.
    IF cardinality(s_events) > 0 THEN
        PERFORM 1
           FROM seats s
           JOIN (SELECT DISTINCT w.e, w.id FROM unnest(s_events, v_seat_ids) AS w(e, id)) w
             ON s.event_id = w.e AND s.seat_id = w.id
          ORDER BY s.event_id, s.seat_id
            FOR UPDATE OF s;
        SELECT array_agg(s ORDER BY w.k) INTO s_seats
          FROM unnest(s_events, v_seat_ids) WITH ORDINALITY AS w(e, id, k)
          LEFT JOIN seats s ON s.event_id = w.e AND s.seat_id = w.id;
    END IF;

    -- The sections involved, their counter stripes locked in ascending
    -- order, and the general-admission counters read under that lock.
    c_keys := '{}'; c_rows := '{}';
    g_keys := '{}'; g_events := '{}'; g_sections := '{}'; g_free := '{}';
    FOR r IN
        SELECT st.event_id AS e, st.section_id AS sec, st.stripe, sc.kind, sc AS section,
               st.capacity - st.sold - st.held AS free
          FROM section_stripes st
          JOIN sections sc ON sc.event_id = st.event_id AND sc.section_id = st.section_id
         WHERE (st.event_id, st.section_id) IN (
                SELECT w.event_id, w.section_id FROM unnest(s_seats) w WHERE w.section_id IS NOT NULL
                UNION
                SELECT u.event_id, u.section_id FROM unnest(p_requests) WITH ORDINALITY AS u
                 WHERE u.section_id IS NOT NULL AND h_status[u.ordinality] IS NULL)
         ORDER BY st.event_id, st.section_id, st.stripe
           FOR UPDATE OF st
    LOOP
        CONTINUE WHEN r.stripe <> 0;
        c_keys := c_keys || (r.e || '/' || r.sec);
        c_rows := c_rows || r.section;
        IF r.kind = 'GENERAL_ADMISSION' THEN
            g_keys := g_keys || (r.e || '/' || r.sec);
            g_events := g_events || r.e;
            g_sections := g_sections || r.sec;
            g_free := g_free || r.free;
        END IF;
    END LOOP;
    g_delta := array_fill(0, ARRAY[cardinality(g_keys)]);

    -- The decisions, hold after hold.
    FOR i IN 1 .. v_n LOOP
        req := p_requests[i];
        CONTINUE WHEN h_status[i] IS NOT NULL;
        -- An earlier hold of the batch won with this request id: a replay
        -- of it, or an error for another selection.
        v_first := h_winner[h_group[i]];
        IF v_first IS NOT NULL THEN
            IF req.fingerprint = (p_requests[v_first]).fingerprint THEN
                h_status[i] := 'TWIN';
                h_twin[i] := v_first;
            ELSE
                h_status[i] := 'REQUEST_ID_REUSED';
            END IF;
            CONTINUE;
        END IF;
        IF clock_timestamp() > v_started + make_interval(secs => req.timeout_ms / 1000.0) THEN
            h_status[i] := 'DEADLINE_EXCEEDED';
            CONTINUE;
        END IF;
        v_e := array_position(e_ids, req.event_id);
        v_u := array_position(u_keys, req.event_id || '/' || req.customer_id);
        v_need := CASE WHEN v_seat_counts[i] > 0 THEN v_seat_counts[i] ELSE req.quantity END;
        IF u_active[v_u] + v_need > (e_rows[v_e]).max_seats_per_customer THEN
            h_status[i] := 'CUSTOMER_HOLD_LIMIT';
            h_detail[i] := (e_rows[v_e]).max_seats_per_customer || ',' || u_active[v_u];
            CONTINUE;
        END IF;
        v_limit := COALESCE((e_rows[v_e]).max_tickets_per_customer, (e_rows[v_e]).max_seats_per_customer);
        IF u_bought[v_u] + u_active[v_u] + v_need > v_limit THEN
            h_status[i] := 'TICKET_LIMIT_REACHED';
            h_detail[i] := v_limit || ',' || u_active[v_u] || ',' || u_bought[v_u];
            CONTINUE;
        END IF;
        v_ids := '{}'; v_rows := '{}'; v_numbers := '{}'; v_labels := '{}'; v_lapsed := '{}';

        IF v_seat_counts[i] > 0 THEN
            v_bad := '{}';
            v_section := NULL;
            v_count := 0;
            FOR k IN h_offset[i] + 1 .. h_offset[i] + v_seat_counts[i] LOOP
                v_seat := s_seats[k];
                IF v_seat.seat_id IS NULL THEN
                    v_bad := v_bad || v_seat_ids[k];
                ELSIF v_section IS NULL THEN
                    v_section := v_seat.section_id;
                ELSIF v_section <> v_seat.section_id THEN
                    v_count := 2;
                END IF;
            END LOOP;
            IF cardinality(v_bad) > 0 THEN
                h_status[i] := 'UNKNOWN_SEAT';
                h_detail[i] := array_to_string(v_bad, ',');
                CONTINUE;
            END IF;
            IF v_count > 1 THEN
                h_status[i] := 'SEATS_IN_SEVERAL_SECTIONS';
                CONTINUE;
            END IF;
            -- Fans waiting on the list for this section come first.
            IF req.offer_seconds IS NULL AND booking_waitlist_waits(req.event_id, v_section) THEN
                h_status[i] := 'SOLD_OUT';
                h_detail[i] := '0';
                CONTINUE;
            END IF;
            FOR k IN h_offset[i] + 1 .. h_offset[i] + v_seat_counts[i] LOOP
                v_seat := s_seats[k];
                -- Free: available, or held by a hold that has lapsed (and
                -- then already counted as held).
                IF NOT (v_seat.status = 'AVAILABLE' OR (v_seat.status = 'HELD' AND v_seat.hold_expires_at < p_now))
                   OR (req.event_id || '/' || v_seat_ids[k]) = ANY (o_keys) THEN
                    v_bad := v_bad || v_seat_ids[k];
                END IF;
                v_ids := v_ids || v_seat_ids[k];
                v_rows := v_rows || v_seat.row_label;
                v_numbers := v_numbers || v_seat.seat_number;
                v_labels := v_labels || v_seat.label;
                v_lapsed := v_lapsed || (v_seat.status = 'HELD');
            END LOOP;
            IF cardinality(v_bad) > 0 THEN
                h_status[i] := 'SEAT_UNAVAILABLE';
                h_detail[i] := array_to_string(v_bad, ',');
                CONTINUE;
            END IF;
        ELSE
            v_section := req.section_id;
            v_c := array_position(c_keys, req.event_id || '/' || v_section);
            IF v_c IS NULL THEN
                h_status[i] := 'UNKNOWN_SECTION';
                h_detail[i] := v_section;
                CONTINUE;
            END IF;
            -- Fans waiting on the list for this section come first.
            IF req.offer_seconds IS NULL AND booking_waitlist_waits(req.event_id, v_section) THEN
                h_status[i] := 'SOLD_OUT';
                h_detail[i] := '0';
                CONTINUE;
            END IF;
            IF (c_rows[v_c]).kind = 'SEATED' THEN
                -- Best available: the lowest free seats no concurrent
                -- picker is looking at (SKIP LOCKED, on the partial index
                -- of available seats), then lapsed holds' seats, past the
                -- seats this call has already given away.
                v_taken := ARRAY(SELECT t.seat_id FROM unnest(o_seats) t WHERE t.event_id = req.event_id);
                SELECT COALESCE(array_agg(q.seat_id ORDER BY q.seat_id), '{}'),
                       COALESCE(array_agg(q.row_label ORDER BY q.seat_id), '{}'),
                       COALESCE(array_agg(q.seat_number ORDER BY q.seat_id), '{}'),
                       COALESCE(array_agg(q.label ORDER BY q.seat_id), '{}'),
                       COALESCE(array_agg(false ORDER BY q.seat_id), '{}')
                  INTO v_ids, v_rows, v_numbers, v_labels, v_lapsed
                  FROM (SELECT s.seat_id, s.row_label, s.seat_number, s.label FROM seats s
                         WHERE s.event_id = req.event_id AND s.section_id = v_section AND s.status = 'AVAILABLE'
                           AND s.seat_id <> ALL (v_taken)
                         ORDER BY s.seat_id
                         LIMIT req.quantity * 3
                           FOR UPDATE SKIP LOCKED) q;
                IF cardinality(v_ids) < req.quantity THEN
                    SELECT u.ids, u.rws, u.nums, u.lbls, u.lps
                      INTO v_ids, v_rows, v_numbers, v_labels, v_lapsed
                      FROM (SELECT array_agg(a.id ORDER BY a.id) AS ids, array_agg(a.rw ORDER BY a.id) AS rws,
                                   array_agg(a.num ORDER BY a.id) AS nums, array_agg(a.lbl ORDER BY a.id) AS lbls,
                                   array_agg(a.lp ORDER BY a.id) AS lps
                              FROM (SELECT * FROM unnest(v_ids, v_rows, v_numbers, v_labels, v_lapsed)
                                           AS x(id, rw, num, lbl, lp)
                                    UNION ALL
                                    SELECT q.seat_id, q.row_label, q.seat_number, q.label, true
                                      FROM (SELECT s.seat_id, s.row_label, s.seat_number, s.label FROM seats s
                                             WHERE s.event_id = req.event_id AND s.section_id = v_section
                                               AND s.status = 'HELD' AND s.hold_expires_at < p_now
                                               AND s.seat_id <> ALL (v_taken)
                                             ORDER BY s.seat_id
                                             LIMIT req.quantity
                                               FOR UPDATE SKIP LOCKED) q) a) u;
                    v_ids := COALESCE(v_ids, '{}');
                END IF;
                IF cardinality(v_ids) < req.quantity THEN
                    SELECT count(*) INTO v_free FROM seats s
                     WHERE s.event_id = req.event_id AND s.section_id = v_section
                       AND (s.status = 'AVAILABLE' OR (s.status = 'HELD' AND s.hold_expires_at < p_now))
                       AND s.seat_id <> ALL (v_taken);
                    IF v_free = 0 THEN
                        h_status[i] := 'SOLD_OUT';
                        h_detail[i] := '0';
                    ELSIF v_free < req.quantity THEN
                        h_status[i] := 'NOT_ENOUGH_SEATS';
                        h_detail[i] := v_free::text;
                    ELSE
                        h_status[i] := 'SEATS_CONTENDED';
                    END IF;
                    CONTINUE;
                END IF;
                -- Adjacent seats of one row when the window has them.
                v_pick := 1;
                FOR k IN 1 .. cardinality(v_ids) - req.quantity + 1 LOOP
                    IF v_ids[k + req.quantity - 1] - v_ids[k] = req.quantity - 1
                       AND v_rows[k + req.quantity - 1] = v_rows[k] THEN
                        v_pick := k;
                        EXIT;
                    END IF;
                END LOOP;
                v_k := v_pick + req.quantity - 1;
                v_ids := v_ids[v_pick : v_k];
                v_rows := v_rows[v_pick : v_k];
                v_numbers := v_numbers[v_pick : v_k];
                v_labels := v_labels[v_pick : v_k];
                v_lapsed := v_lapsed[v_pick : v_k];
            ELSE
                -- General admission: the counter, after the holds before
                -- this one; lapsed holds give their places back when it is
                -- short.
                v_g := array_position(g_keys, req.event_id || '/' || v_section);
                IF g_free[v_g] < v_need THEN
                    WITH lapsed AS (
                        SELECT h.hold_id, h.quantity FROM holds h
                         WHERE h.event_id = req.event_id AND h.section_id = v_section
                           AND h.state = 'HELD' AND h.expires_at < p_now
                         ORDER BY h.expires_at
                         LIMIT 100
                           FOR UPDATE SKIP LOCKED
                    ), ended AS (
                        UPDATE holds h SET state = 'EXPIRED', ended_at = p_now
                          FROM lapsed l WHERE h.hold_id = l.hold_id
                        RETURNING l.quantity
                    )
                    SELECT COALESCE(sum(x.quantity), 0) INTO v_freed FROM ended x;
                    g_free[v_g] := g_free[v_g] + v_freed;
                    g_delta[v_g] := g_delta[v_g] - v_freed;
                END IF;
                IF g_free[v_g] < v_need THEN
                    h_status[i] := CASE WHEN g_free[v_g] <= 0 THEN 'SOLD_OUT' ELSE 'NOT_ENOUGH_SEATS' END;
                    h_detail[i] := GREATEST(g_free[v_g], 0)::text;
                    CONTINUE;
                END IF;
                g_free[v_g] := g_free[v_g] - v_need;
                g_delta[v_g] := g_delta[v_g] + v_need;
            END IF;
        END IF;

        -- The hold wins.
        v_c := array_position(c_keys, req.event_id || '/' || v_section);
        v_e := array_position(e_ids, req.event_id);
        h_status[i] := 'OK';
        IF h_group[i] IS NOT NULL THEN
            h_winner[h_group[i]] := i;
        END IF;
        h_section[i] := v_section;
        h_n[i] := v_need;
        h_amount[i] := (c_rows[v_c]).price_minor * v_need;
        h_currency[i] := (c_rows[v_c]).currency;
        h_expires[i] := p_now + make_interval(secs => COALESCE(req.offer_seconds, (e_rows[v_e]).hold_ttl_seconds));
        h_seat_from[i] := cardinality(o_seats) + 1;
        h_seat_count[i] := cardinality(v_ids);
        u_active[v_u] := u_active[v_u] + v_need;
        -- A lapsed hold's seat taken over is already counted as held.
        FOR k IN 1 .. cardinality(v_ids) LOOP
            o_seats := o_seats || ROW(req.hold_id, req.event_id, v_section, v_ids[k], v_rows[k], v_numbers[k],
                                      v_labels[k], h_expires[i], NOT v_lapsed[k])::booking_taken_seat;
            o_keys := o_keys || (req.event_id || '/' || v_ids[k]);
        END LOOP;
    END LOOP;

    -- The winners, written together.
    IF 'OK' = ANY (h_status) THEN
        WITH claimed AS (
            UPDATE seats s
               SET status = 'HELD', hold_id = w.hold_id, hold_expires_at = w.expires_at
              FROM unnest(o_seats) w
             WHERE s.event_id = w.event_id AND s.seat_id = w.seat_id
               AND (s.status = 'AVAILABLE' OR (s.status = 'HELD' AND s.hold_expires_at < p_now))
            RETURNING 1
        ), kept AS (
            INSERT INTO hold_seats (hold_id, event_id, seat_id, row_label, seat_number, label)
            SELECT w.hold_id, w.event_id, w.seat_id, w.row_label, w.seat_number, w.label FROM unnest(o_seats) w
        ), made AS (
            INSERT INTO holds (hold_id, event_id, customer_id, section_id, quantity, state, amount_minor, currency,
                               expires_at, created_at)
            SELECT u.hold_id, u.event_id, u.customer_id, h_section[u.ordinality], h_n[u.ordinality], 'HELD',
                   h_amount[u.ordinality], h_currency[u.ordinality], h_expires[u.ordinality], p_now
              FROM unnest(p_requests) WITH ORDINALITY AS u
             WHERE h_status[u.ordinality] = 'OK'
        )
        SELECT count(*) INTO v_count FROM claimed;
        IF v_count <> cardinality(o_seats) THEN
            RAISE EXCEPTION 'a seat decided free was not';
        END IF;

        IF p_pause_seconds > 0 THEN
            PERFORM pg_sleep(p_pause_seconds);
        END IF;
    END IF;

    -- The counters, last (booking_move_counters), which the decisions above
    -- kept within capacity (the CHECK stands behind them). A lapsed hold's
    -- seat taken over is already counted as held; lapsed general-admission
    -- holds ended above give their places back here.
    IF 'OK' = ANY (h_status) OR 0 <> ANY (g_delta) THEN
        PERFORM booking_move_counters(ARRAY(
            SELECT ROW(w.event_id, w.section_id, w.seat_id, 1, 0)::booking_counter_move
              FROM unnest(o_seats) w
             WHERE w.counted
            UNION ALL
            SELECT ROW(g.e, g.sec, NULL, g.n, 0)::booking_counter_move
              FROM unnest(g_events, g_sections, g_delta) AS g(e, sec, n)
             WHERE g.n <> 0));
    END IF;

    -- A hold that finished past its caller's deadline must not commit for a
    -- caller that has given up: the batch rolls back, naming them, and the
    -- service sends the others again.
    v_late := '{}';
    FOR i IN 1 .. v_n LOOP
        IF h_status[i] = 'OK'
           AND clock_timestamp() > v_started + make_interval(secs => (p_requests[i]).timeout_ms / 1000.0) THEN
            v_late := v_late || i;
        END IF;
    END LOOP;
    IF cardinality(v_late) > 0 THEN
        RAISE EXCEPTION 'DEADLINE_EXCEEDED' USING DETAIL = array_to_string(v_late, ','),
            HINT = 'the holds at these positions finished past their deadline; the others may be sent again';
    END IF;

    -- A key claimed here names its group's winner; a group without one
    -- leaves its key unused.
    IF cardinality(v_inserted) > 0 THEN
        v_count := 0;
        FOR i IN 1 .. v_n LOOP
            IF h_inserted[i] AND h_winner[i] IS DISTINCT FROM i THEN
                v_count := v_count + 1;
            END IF;
        END LOOP;
        IF v_count > 0 THEN
            DELETE FROM hold_requests q
             USING unnest(p_requests) WITH ORDINALITY AS u
             WHERE h_inserted[u.ordinality] AND h_winner[u.ordinality] IS NULL
               AND q.event_id = u.event_id AND q.customer_id = u.customer_id
               AND q.request_id = u.request_id AND q.hold_id = u.hold_id;
            UPDATE hold_requests q
               SET hold_id = (p_requests[h_winner[u.ordinality]]).hold_id,
                   fingerprint = (p_requests[h_winner[u.ordinality]]).fingerprint
              FROM unnest(p_requests) WITH ORDINALITY AS u
             WHERE h_inserted[u.ordinality] AND h_winner[u.ordinality] <> u.ordinality
               AND q.event_id = u.event_id AND q.customer_id = u.customer_id
               AND q.request_id = u.request_id AND q.hold_id = u.hold_id;
        END IF;
    END IF;

    FOR i IN 1 .. v_n LOOP
        v_first := CASE WHEN h_status[i] = 'TWIN' THEN h_twin[i] ELSE i END;
        IF h_status[v_first] = 'REPLAY' THEN
            RETURN QUERY SELECT i, NULL::text, NULL::text, d.*, true FROM hold_details d
                          WHERE d.hold_id = h_prior[v_first];
        ELSIF h_status[v_first] = 'OK' THEN
            idx := i;
            outcome := NULL;
            detail := NULL;
            hold_id := (p_requests[v_first]).hold_id;
            event_id := (p_requests[v_first]).event_id;
            customer_id := (p_requests[v_first]).customer_id;
            section_id := h_section[v_first];
            quantity := h_n[v_first];
            state := 'HELD';
            amount_minor := h_amount[v_first];
            currency := h_currency[v_first];
            expires_at := h_expires[v_first];
            created_at := p_now;
            confirmed_at := NULL;
            payment_id := NULL;
            refund_amount_minor := NULL;
            v_k := h_seat_from[v_first];
            v_count := h_seat_count[v_first];
            SELECT COALESCE(array_agg(w.seat_id ORDER BY w.ordinality), '{}'),
                   COALESCE(array_agg(w.row_label ORDER BY w.ordinality), '{}'),
                   COALESCE(array_agg(w.seat_number ORDER BY w.ordinality), '{}'),
                   COALESCE(array_agg(w.label ORDER BY w.ordinality), '{}')
              INTO seat_ids, row_labels, seat_numbers, labels
              FROM unnest(o_seats[v_k : v_k + v_count - 1]) WITH ORDINALITY AS w;
            replayed := v_first <> i;
            RETURN NEXT;
        ELSE
            RETURN QUERY SELECT i, h_status[v_first], h_detail[v_first], NULL::uuid, NULL::bigint, NULL::text,
                NULL::text, NULL::integer, NULL::text, NULL::bigint, NULL::text, NULL::timestamptz,
                NULL::timestamptz, NULL::timestamptz, NULL::text, NULL::bigint, NULL::bigint[], NULL::text[],
                NULL::integer[], NULL::text[], NULL::boolean;
        END IF;
    END LOOP;
END;
$$;
