-- A run's queued_at is when it last entered the queue: a new queued run, and a run whose
-- status becomes queued (a step that yields, a retry, a resume, the recovery sweep's
-- requeue, a timer or an event that wakes it). Set here, by the database, for every writer;
-- the WHEN clauses are evaluated without calling the function, so the engine's other
-- updates of a run (every step) cost nothing here. The stuck "queued too long" check reads
-- it instead of looking up each queued run's latest event.
CREATE OR REPLACE FUNCTION agents_run_set_queued_at() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    NEW.queued_at := clock_timestamp();
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS agents_run_queued_at_inserted ON agents_run;
CREATE TRIGGER agents_run_queued_at_inserted BEFORE INSERT ON agents_run
    FOR EACH ROW WHEN (NEW.status = 'queued')
    EXECUTE FUNCTION agents_run_set_queued_at();

DROP TRIGGER IF EXISTS agents_run_queued_at_changed ON agents_run;
CREATE TRIGGER agents_run_queued_at_changed BEFORE UPDATE OF status ON agents_run
    FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status IS DISTINCT FROM 'queued')
    EXECUTE FUNCTION agents_run_set_queued_at();
