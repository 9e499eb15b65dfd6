"""Field ecology over the curated detections: spatial capture-recapture density and its inputs."""
