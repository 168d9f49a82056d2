"""OCI images of environments: `provision image NAME` (build: the bundle checked and built
inside the base with no network; assemble: the layers, config, archive and Apptainer definition;
oci: the OCI layout written deterministically, and a base read)."""
