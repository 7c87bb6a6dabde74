"""The web console: a page served at `/` that speaks through the daemon's own API."""
