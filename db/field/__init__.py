"""The field study in the store: individuals' histories, the capture-recapture study, identities as decided,
confirmed or uncertain, density and activity, the Camtrap DP export. It stands above identification (the
uncertain identities read the calibrated model) and reads the deployments and annotations of ``db.records``."""
