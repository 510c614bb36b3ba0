"""One schema change per revision; applied revisions are never edited."""
