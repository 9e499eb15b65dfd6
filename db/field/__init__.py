"""The field study in the store: annotations, camera deployments, individuals' histories, the
capture-recapture study, density and activity, the Camtrap DP export."""
