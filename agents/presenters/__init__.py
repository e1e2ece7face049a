"""What the runs pages, the admin console and the live feeds show of runs, alike: the runs
table and a run's sections (`pages`), the filter forms and page positions (`forms`), charts of
trends (`trends`), the waterfall (`waterfall`), the chat's pieces (`chat_pages`) and the
context record (`context_record`). The surfaces (agents/web, agents/console, agents/live) import
these; none imports another surface's internals for them."""
