"""rlinks-rllib."""
