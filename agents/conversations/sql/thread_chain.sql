-- Not a statement: the WITH clause that walks a thread's parent chain, from the session up
-- to its root; thread_messages.sql and thread_ancestors.sql follow it.
WITH RECURSIVE chain (id, parent_id, fork_seq, inherited, upto, depth) AS (
    SELECT id, parent_id, fork_seq, inherited_messages, NULL::integer, 0
      FROM agents_agentsession WHERE id = %(session)s AND tenant_id = %(tenant)s
    UNION ALL
    SELECT p.id, p.parent_id, p.fork_seq, p.inherited_messages, c.fork_seq, c.depth + 1
      FROM agents_agentsession p JOIN chain c ON p.id = c.parent_id
     WHERE p.tenant_id = %(tenant)s AND c.depth < 1000
)
