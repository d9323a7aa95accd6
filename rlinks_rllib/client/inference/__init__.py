"""How :class:`~rlinks_rllib.client.EnvClient` gets its actions: local inference (with its
background sender and multi-agent policy set) or served by the runner.
"""
