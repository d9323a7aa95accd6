"""The learner configs, shipped in the wheel as ``rlinks_rllib.configs`` (see ``rlinks_rllib/bundled.py``)."""
