-- Persist a step's outcome: calls agents_persist_step, defined in agents/runtime/engine/sql/
-- (installed by migrations). No row back: another worker superseded the caller.
SELECT * FROM agents_persist_step(
    p_tenant => %(tenant)s,
    p_run => %(run)s,
    p_version => %(version)s,
    p_worker => %(worker)s,
    p_status => %(status)s,
    p_next_step => %(next_step)s,
    p_seq => %(seq)s,
    p_attempts => %(attempts)s,
    p_owner => %(owner)s,
    p_output => %(output)s,
    p_error => %(error)s,
    p_not_before => %(not_before)s,
    p_waiting_for => %(waiting_for)s,
    p_schema_version => %(schema_version)s,
    p_step => %(step)s,
    p_state => %(state)s,
    p_messages_upto => %(messages_upto)s,
    p_attempt => %(attempt)s,
    p_started_at => %(started_at)s,
    p_duration_ms => %(duration_ms)s,
    p_appended => %(appended)s)
