-- Claim a run for a step: calls agents_claim_run, defined in agents/runtime/engine/sql/
-- (installed by migrations). No row back: the run is not runnable or its lease is held.
SELECT * FROM agents_claim_run(
    p_tenant => %(tenant)s, p_run => %(run)s, p_worker => %(worker)s, p_lease => %(lease)s)
