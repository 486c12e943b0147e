"""Bundled models: the `bundled:NAME` zoo (onnx's light models and the transformer block) and
the random weights that fill the light models' stripped initializers."""
