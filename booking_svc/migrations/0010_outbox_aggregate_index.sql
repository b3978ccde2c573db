-- The relay picks, for each order (aggregateid) among a batch of unpublished
-- rows, the oldest unpublished row of that order: look it up by order
-- instead of walking every unpublished row.
CREATE INDEX outbox_unpublished_by_aggregate ON outbox (aggregateid, seq) WHERE published_at IS NULL;
