-- Kairos schema, version 25: an HTTP target may ask for a signed identity token (docs/http-delivery.md,
-- "Identity tokens"). jobs.http_auth holds the target's auth object as the API validated it, e.g.
-- {"type": "oidc", "audience": "https://hooks.example.com"}; NULL: no token (the default).
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS http_auth JSONB;
