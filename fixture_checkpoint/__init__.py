"""Checkpoints for machines without the real weights: the tiny fixture (build.py) and the synthetic full-size one
(synthetic.py), both with the fixture's inference.py."""
