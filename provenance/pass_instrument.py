"""Tracking rides along a build as a TVM pass instrument, so the passes that run are exactly the
ones a plain build runs (provmap.provenance.build); after each pass that changed a followed
function, the tracker matches the module before and after it (provmap.provenance.propagate)."""

from __future__ import annotations

import tvm


@tvm.instrument.pass_instrument
class TrackingInstrument:
    """Updates a tracker after every pass that changed the followed functions (nested included).
    TIR-level passes (tirx., s_tir.) never touch the Relax bindings provenance lives on."""

    def __init__(self, tracker):
        self.tracker = tracker

    def run_after_pass(self, mod, info):
        t = self.tracker
        if info.name.startswith(("tirx.", "s_tir.")):
            return
        if t.tracks(mod) and t.changed(mod):
            t.update(mod, info.name)
