-- What the run's steps appended to its logs (ctx.append), up to checkpoint %(seq)s, in order:
-- one row per checkpoint that appended something (agents/runtime/engine/store.py run_logs).
SELECT appended FROM agents_checkpoint
 WHERE tenant_id = %(tenant)s AND run_id = %(run)s AND seq <= %(seq)s AND appended IS NOT NULL
 ORDER BY seq
