"""Episode chunks into RLlib's episodes: single-agent and multi-agent.
"""
