"""HTTP API (aiohttp) on the control socket and optional TCP listeners."""
