-- Dead waiters, the safety net and the adaptive rate's bounds (additive;
-- existing rooms get the defaults: a 5-minute presence grace, no safety
-- net, bounds equal to the base rate, i.e. no adaptation).
ALTER TABLE queue_events
    ADD COLUMN presence_grace_ms             bigint  NOT NULL DEFAULT 300000 CHECK (presence_grace_ms > 0),
    ADD COLUMN safety_net                    boolean NOT NULL DEFAULT false,
    -- 0: the base rate (admission_rate_per_second).
    ADD COLUMN admission_rate_min_per_second integer NOT NULL DEFAULT 0 CHECK (admission_rate_min_per_second >= 0),
    ADD COLUMN admission_rate_max_per_second integer NOT NULL DEFAULT 0 CHECK (admission_rate_max_per_second >= 0);
