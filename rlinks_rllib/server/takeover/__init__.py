"""Take-overs: the marker on a chunk and its tally, episodes cut where a teacher takes over, and
confirmations held until a held-back part is handed on.
"""
