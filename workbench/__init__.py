"""The workbench: tools for debugging a partition once it is built.

compare (tensors at every boundary against a reference run), bisect (the first diverging
prefix), profile (time per partition and kernel), report (one HTML page), annotate (the ONNX
model with each node's backend, for Netron) and explain (why each node went where it did).
They sit above partition because they read its artifacts and rebuild its subgraphs; nothing
below imports them."""
