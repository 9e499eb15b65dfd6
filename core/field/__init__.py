"""The field study over the curated detections: detectors, camera stations, capture histories,
population size, density and activity, home ranges, the Camtrap DP writer."""
