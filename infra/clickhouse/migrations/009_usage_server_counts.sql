-- Two counts of a model call: input/cache_read/output_tokens are Jev's own count (it reserved the budget); the
-- server_* columns are the model server's `usage` (prompt, prompt_tokens_details.cached_tokens, completion),
-- which settles the bill. count_source says where the server columns come from: jev (no server call: they are
-- 0), server, missing (the server reported no usage: they hold Jev's count) or mixed (some calls reported none:
-- Jev's count stands in for those). Cost is priced on the server columns wherever count_source is not jev.
ALTER TABLE usage_events
    ADD COLUMN IF NOT EXISTS server_input_tokens UInt32 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS server_cache_read_tokens UInt32 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS server_output_tokens UInt32 DEFAULT 0,
    ADD COLUMN IF NOT EXISTS count_source LowCardinality(String) DEFAULT 'jev'
