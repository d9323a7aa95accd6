"""The policies a simulator runs itself, in numpy or onnxruntime (no Ray, no torch), and the
one call that picks the one a runner's config needs.
"""
