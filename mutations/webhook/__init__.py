"""The webhook: POST /mutate (AdmissionReview in, AdmissionReview out) and the probes."""
