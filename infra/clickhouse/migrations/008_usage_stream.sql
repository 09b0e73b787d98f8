-- Streamed answers: the time from admission to the first chunk and the output tokens per second of the
-- stream, on the one score row a streamed response writes (0 on every other row).
ALTER TABLE usage_events
    ADD COLUMN IF NOT EXISTS first_chunk_ms Float32 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS tokens_per_s Float32 DEFAULT 0
