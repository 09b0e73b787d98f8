-- Streamed answers: the tokens the stream's chunks delivered to the client, in the request model's tokenizer, on
-- the one score row a streamed response writes (0 on every other row). output_tokens on that row counts what the
-- generator generated (in its own tokenizer, as its server bills it); what lies between was never delivered:
-- cleanup's cuts, the stream's length cut, a withheld sentence.
ALTER TABLE usage_events
    ADD COLUMN IF NOT EXISTS delivered_tokens UInt32 DEFAULT 0
