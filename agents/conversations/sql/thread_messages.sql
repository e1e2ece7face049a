-- After thread_chain.sql: the thread's messages after position %(after)s, oldest first.
SELECT c.inherited + m.seq, m.session_id, m.seq, m.role, m.content, m.tool_call, m.tool_result
  FROM chain c
  JOIN agents_message m ON m.session_id = c.id AND m.tenant_id = %(tenant)s
 WHERE (c.upto IS NULL OR m.seq <= c.upto) AND m.seq > %(after)s - c.inherited
 ORDER BY 1
