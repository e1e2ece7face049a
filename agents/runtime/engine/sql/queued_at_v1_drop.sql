DROP TRIGGER IF EXISTS agents_run_queued_at_inserted ON agents_run;
DROP TRIGGER IF EXISTS agents_run_queued_at_changed ON agents_run;
DROP FUNCTION IF EXISTS agents_run_set_queued_at();
