-- The trace context of the call that wrote an outbox row (a W3C
-- traceparent, NULL when it had none): the relay puts it in the stream
-- entry, so that the consumer's work (a ticket's issuance) joins the trace
-- of the confirm that caused it. Adding a NULL column rewrites nothing, and
-- a replica of the previous release writes rows without it.
ALTER TABLE outbox ADD COLUMN traceparent text;
