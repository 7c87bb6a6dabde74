"""End-to-end tests: real processes, models, paced devices and peers."""
