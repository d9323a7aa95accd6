"""The dummy client, shipped in the wheel as ``rlinks_rllib.examples`` (see ``rlinks_rllib/bundled.py``)."""
