-- After thread_chain.sql: (session, seq it is seen up to, depth), root first.
SELECT id, upto, depth FROM chain ORDER BY depth DESC
