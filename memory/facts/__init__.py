"""What is remembered: writing facts (one or a batch), cleaning their text and values,
near-duplicates, what a conversation says (extraction, mentions, time words), secrets kept out,
retention, and the step that proposes them (`ctx.memory`)."""
