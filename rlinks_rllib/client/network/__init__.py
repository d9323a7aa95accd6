"""The client's connection: addresses, the socket (TCP, TLS, WebSocket), one conversation over it,
retries, the directory lookup, :class:`RLinkClient`, and one client shared by a loop and its sender.
"""
