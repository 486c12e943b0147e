"""Runtime layer: backends, the built artifact, the executor and provenance lookup at dispatch time."""
