-- Whether fans wait on an event's waiting list for a section: an entry
-- still WAITING for that section or for any section. While one does, the
-- section's seats that come back are the list's (booking_hold_seats refuses
-- every other hold). Two probes of the partial index of waiting entries.
CREATE OR REPLACE FUNCTION booking_waitlist_waits(p_event_id bigint, p_section_id text)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (SELECT 1 FROM waitlist_entries w
                    WHERE w.event_id = p_event_id AND w.section_id = p_section_id AND w.state = 'WAITING')
        OR EXISTS (SELECT 1 FROM waitlist_entries w
                    WHERE w.event_id = p_event_id AND w.section_id IS NULL AND w.state = 'WAITING')
$$;
