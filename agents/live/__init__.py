"""Live progress over websockets: events fan out through the channel layer after commit
(`broadcast`), the consumer (`agents.live.consumers`) checks who may see what (`access`) and
answers each event with the same template partials the pages render (`render`)."""
