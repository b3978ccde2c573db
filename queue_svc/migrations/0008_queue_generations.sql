-- Each waiting room's generation (queue_svc.rebuild): it grows by one each
-- time the admitter rebuilds the room from its lifecycle after Redis lost
-- the room's data. A room without a row is generation 1. The room's Redis
-- marker (`{ev:<id>}:gen`) must be at least this, or the room is rebuilt.
CREATE TABLE queue_generations (
    event_id   bigint      PRIMARY KEY CHECK (event_id > 0),
    generation bigint      NOT NULL CHECK (generation >= 1),
    rebuilt_at timestamptz NOT NULL DEFAULT now()
);
