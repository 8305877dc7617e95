"""What every layer uses: the errors a user sees (``errors``), logging (``logging_utils``), atomic file writes
(``files``), worker processes with their lifeline (``processes``), the release (``version``), and the previous
release's module paths (``old_paths``)."""
