-- A rotated client secret (emulator clients rotate): the secret it replaced keeps working at the
-- token endpoint until previous_secret_expires_at (Unix seconds), so that its users can switch
-- over; kept as salt + SHA-256 like the current one. NULL: no overlap under way.
ALTER TABLE oauth_clients ADD COLUMN previous_secret_salt TEXT;
ALTER TABLE oauth_clients ADD COLUMN previous_secret_hash TEXT;
ALTER TABLE oauth_clients ADD COLUMN previous_secret_expires_at DOUBLE PRECISION;
