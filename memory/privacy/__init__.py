"""A person's own memory: the privacy page (view, edit, export, delete), its links, the
tenant's memory settings, and the assistant a person connects with a token of their own."""
