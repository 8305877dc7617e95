"""What every layer uses: the errors a user sees (``errors``), logging (``logging_utils``), atomic file writes
(``files``), worker processes with their lifeline (``processes``) and the release (``version``)."""
