"""What the worker knows about its tables right now (for /status and metrics)."""
