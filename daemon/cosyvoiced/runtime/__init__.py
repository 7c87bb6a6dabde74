"""Process plumbing: logging, systemd notification, health, metrics, real-time priority, the ONNX session factory."""
