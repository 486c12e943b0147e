"""Keep the backend libraries from phoning home or writing into the user's home.

Why: `import openvino` runs OpenVINO's converter package, which sends a "general_import"
telemetry event and writes `~/intel/openvino_ga_cid` and `~/intel/stats` unless the user has
opted out; importing ONNX Runtime writes a device id and a database under
`$XDG_CACHE_HOME/Microsoft/DeveloperTools/.onnxruntime` (else `~/.cache/...`).  provmap runs
these libraries as tools on the user's models; it must not enrol the user in anything, nor
leave files outside its own directories.  The mechanisms are the libraries' own:

- ONNX Runtime reads `ORT_DISABLE_TELEMETRY` when it starts: set (unless the user set it),
  it neither sends events nor writes its device id (checked: nothing is written under HOME).
- OpenVINO's converter falls back to its own no-op stub (`openvino.tools.ovc.telemetry_stub`)
  when `openvino_telemetry` cannot be imported; provmap makes it unimportable in its own
  process (never on disk, never for other programs), unless OpenVINO is already loaded.

`PROVMAP_BACKEND_TELEMETRY=1` leaves both libraries exactly as they are.  Stdlib only: this
runs from `provmap/__init__.py`, before anything imports a backend.
"""

from __future__ import annotations

import os
import sys


def install() -> None:
    if os.environ.get("PROVMAP_BACKEND_TELEMETRY") == "1":
        return
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    if "openvino" not in sys.modules and "openvino_telemetry" not in sys.modules:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]  # import fails
