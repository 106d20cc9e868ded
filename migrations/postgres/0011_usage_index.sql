-- hermes-agent schema, version 11 (PostgreSQL): usage sums read a window of days, not every
-- step ever run. GET /v1/usage, /usage and `hermes-agent usage` sum the model rows of
-- task_steps created in the last N days. Without this index each reading scanned the whole
-- trace, tool outputs and model answers included; with it, it reads the window's model rows
-- from the index (every column the sums need is in it; task_id joins them to their task and job).
CREATE INDEX task_steps_model_usage ON task_steps
    (created_at, task_id, name, request_tokens, result_tokens, duration_ms)
    WHERE kind = 'model';
