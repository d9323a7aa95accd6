"""What a runner hands RLlib, and when: on-policy scheduling and its ledger, the off-policy
backlog, receipts for results RLlib drops, and update shares that follow the clients.
"""
