"""Identification in the store: benchmarks, training runs, evaluations and comparisons, spot
evidence, calibration, match review, the vector index, the Kaggle submission."""
