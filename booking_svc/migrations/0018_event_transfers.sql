-- Whether fans may transfer their tickets to friends (until the event
-- starts). The default allows it, so events that exist keep the default.
ALTER TABLE events ADD COLUMN transfers boolean NOT NULL DEFAULT true;
