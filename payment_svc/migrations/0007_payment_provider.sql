-- Which provider took the payment's money: 'sandbox' (which takes none: a
-- laptop or a staging mesh; every payment before this column was the
-- sandbox's) or 'stripe'. A ticket paid in the sandbox says so.
ALTER TABLE payments ADD COLUMN provider text NOT NULL DEFAULT 'sandbox'
    CHECK (provider IN ('sandbox', 'stripe'));
