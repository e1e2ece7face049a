-- Counts of a tenant's runs by status (agents_runcount), kept by triggers on agents_run: a
-- row per change, never an update, so two transactions never wait for each other here.
-- Inserted and deleted runs are counted once per statement (a bulk load or a retention
-- batch adds one row per tenant and status); a status change adds -1 for the old status and
-- +1 for the new one. The rows pass row-level security like the run's own write: same tenant.
CREATE OR REPLACE FUNCTION agents_run_counts_inserted() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agents_runcount (tenant_id, status, n)
    SELECT tenant_id, status, count(*) FROM agents_run_new GROUP BY tenant_id, status;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION agents_run_counts_deleted() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agents_runcount (tenant_id, status, n)
    SELECT tenant_id, status, -count(*) FROM agents_run_old GROUP BY tenant_id, status;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION agents_run_counts_changed() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agents_runcount (tenant_id, status, n)
    VALUES (OLD.tenant_id, OLD.status, -1), (NEW.tenant_id, NEW.status, 1);
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS agents_run_counts_inserted ON agents_run;
CREATE TRIGGER agents_run_counts_inserted AFTER INSERT ON agents_run
    REFERENCING NEW TABLE AS agents_run_new
    FOR EACH STATEMENT EXECUTE FUNCTION agents_run_counts_inserted();

DROP TRIGGER IF EXISTS agents_run_counts_deleted ON agents_run;
CREATE TRIGGER agents_run_counts_deleted AFTER DELETE ON agents_run
    REFERENCING OLD TABLE AS agents_run_old
    FOR EACH STATEMENT EXECUTE FUNCTION agents_run_counts_deleted();

-- Only a real change of status: the engine's many other updates of a run cost nothing here.
DROP TRIGGER IF EXISTS agents_run_counts_changed ON agents_run;
CREATE TRIGGER agents_run_counts_changed AFTER UPDATE OF status ON agents_run
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.tenant_id <> NEW.tenant_id)
    EXECUTE FUNCTION agents_run_counts_changed();
