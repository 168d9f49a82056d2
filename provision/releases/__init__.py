"""New TensorFlow releases from the package index into the matrix (`provision matrix update`, a
maintainer command): `wheels` reads only the bytes it needs of a release's wheels (HTTP Range),
`derive` turns them into a row's facts, `update` compares them with the matrix and writes the
rows through `provision.matrix.toml_writer`, the one writer of the data file."""
