"""The measuring room: what a candidate, a plan or a boundary costs on this machine.

The search room (rules, generate, prune, constraints, search, collage, refine) decides the cover
and speaks only in `Candidate` and `Estimate`; everything that runs code to put a number on them
lives here: the estimator interface and the measuring estimator, the isolated worker, the cost
cache, boundary and accuracy checks, remote measurement, the machine's conditions (contention,
hygiene), in-context prices and interleaved end-to-end timing.  Issue 35 changes how candidates
are priced; this room is where that change happens, without touching the search.

The room imports from the search room only the vocabulary (`candidate`) and the model loader
(`model_source`); tests/test_layers.py holds it to that."""

#: Quantized outputs agree within this many quantization steps, wherever a decision is made
#: (the accuracy guard, `compare --quant-steps`, bench): one rounding flip (quant_steps.py says
#: why).  Here, importing nothing, so the CLI's help shows it without importing numpy.
DEFAULT_QUANT_STEPS = 1
