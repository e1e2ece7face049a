-- Give the tenant's embedding turn back.
SELECT pg_advisory_unlock(%s)
