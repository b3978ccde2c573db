-- Re-entry: whether an admitted ticket's holder is inside now (an exit scan
-- sets it false; at an event with re-entry, the next entry scan sets it true
-- again, with one conditional UPDATE, so two gates re-admit it once).
ALTER TABLE checkins
    ADD COLUMN inside        boolean     NOT NULL DEFAULT true,
    ADD COLUMN last_moved_at timestamptz;
