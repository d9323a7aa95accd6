"""The runner's network side: the listener and its sessions, WebSocket and TLS, deadlines, write
queues, the inbox to ``sample()``, counters, and the directory of runners.
"""
