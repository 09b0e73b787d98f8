-- Every stored event_id, as a key-value table: the usage sink probes it before inserting, so redelivered
-- events are dropped at a cost that does not grow with the table (RocksDB point look-ups, ~15 ms per 5,000 ids).
-- Keys expire after 2 days (the TTL is in seconds): redelivery comes within minutes of the original.
CREATE TABLE IF NOT EXISTS usage_event_ids
(
    event_id String
)
ENGINE = EmbeddedRocksDB(172800)
PRIMARY KEY event_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_event_ids_mv TO usage_event_ids AS
SELECT event_id FROM usage_events
