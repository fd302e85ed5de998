"""Guardrails: what a sender, an agent and the installation may spend, held mail, fair
turns between senders, and the model endpoint's circuit breaker."""
