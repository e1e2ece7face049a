DROP TRIGGER IF EXISTS agents_run_counts_inserted ON agents_run;
DROP TRIGGER IF EXISTS agents_run_counts_deleted ON agents_run;
DROP TRIGGER IF EXISTS agents_run_counts_changed ON agents_run;
DROP FUNCTION IF EXISTS agents_run_counts_inserted();
DROP FUNCTION IF EXISTS agents_run_counts_deleted();
DROP FUNCTION IF EXISTS agents_run_counts_changed();
