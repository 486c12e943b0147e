import sys
from pathlib import Path

# small_models lives next to the tests; the package itself is installed (pip install -e .).
sys.path.insert(0, str(Path(__file__).parent))
