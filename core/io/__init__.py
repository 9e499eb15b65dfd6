"""Files and pictures in and out: decoding photos, drawing boxes, obscuring people, safe CSV cells,
the Kaggle re-identification format."""
