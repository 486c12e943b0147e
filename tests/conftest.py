import os
import sys
import tempfile
from pathlib import Path

# small_models lives next to the tests; the package itself is installed (pip install -e .).
sys.path.insert(0, str(Path(__file__).parent))

# Tests never write to the user's own configuration: the trust list (~/.config/provmap), the
# cost cache and the tuning database (~/.cache/provmap) all go to one directory of this run,
# set here, before any test or the processes it starts can read the variables.  A test that
# needs its own (an empty trust list, a fresh cache) still sets them with monkeypatch.
_HOME = Path(tempfile.mkdtemp(prefix="provmap-tests-"))
for _var, _name in (("PROVMAP_TRUST", "trusted"), ("PROVMAP_CACHE", "costs.sqlite"),
                    ("PROVMAP_TUNING_DB", "tuning")):
    os.environ[_var] = str(_HOME / _name)
