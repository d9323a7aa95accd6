"""Served actions: the episodes recorded for clients the runner acts for, the batcher of their
observations, the forward pass, and actions a simulator took itself.
"""
