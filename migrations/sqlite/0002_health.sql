-- One row the daemon rewrites to check that the database can still be written (`/healthz`).
CREATE TABLE health (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    checked_at TEXT NOT NULL
);
