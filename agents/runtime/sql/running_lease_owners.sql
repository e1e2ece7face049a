-- Sweep (system context): the workers holding running runs (their liveness is checked next).
SELECT DISTINCT lease_owner FROM agents_run WHERE status = 'running' AND lease_owner <> ''
