-- The door's settings of an event, which the check-in service reads:
-- whether a static code (printed, e-mailed: no rotation) admits, and whether
-- a ticket that left may come back in. NULL static codes: the kind's default
-- (a flight's boarding passes are printed and admit; a concert takes
-- rotating codes only). Additive with defaults, so a replica of the previous
-- release still creates events during a rollout.
ALTER TABLE events
    ADD COLUMN checkin_static_codes boolean,
    ADD COLUMN checkin_reentry      boolean NOT NULL DEFAULT false;
