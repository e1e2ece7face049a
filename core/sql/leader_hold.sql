-- Take or renew the lease `name` for `holder`: it is taken when free, expired or already the
-- holder's; one row back when the holder has it now, none when another live holder does.
INSERT INTO core_leaderlease (name, holder, expires_at)
VALUES (%(name)s, %(holder)s, clock_timestamp() + make_interval(secs => %(ttl)s))
ON CONFLICT (name) DO UPDATE
   SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
 WHERE core_leaderlease.holder = EXCLUDED.holder
    OR core_leaderlease.expires_at < clock_timestamp()
RETURNING holder
