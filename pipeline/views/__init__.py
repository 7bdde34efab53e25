"""Views of a session's memory and work: status, details and the instant projection."""
