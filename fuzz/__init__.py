"""Fuzz targets for the RLlink protocol layer (see ``fuzz/targets.py``)."""
