"""Telling individuals apart: backbones, heads and losses, training, features, retrieval and
re-ranking, spot evidence, calibration, benchmark splits and evaluation."""
