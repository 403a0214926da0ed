"""Task plugins: RULER-style synthetic tasks, HotpotQA and user JSONL files (see ``base.Task``)."""
