"""meson test's entry to the Python suites: pytest with the arguments given, or
meson's skip (exit 77) saying why when this interpreter has no pytest
(tools/bootstrap.sh installs it; the H200 host's step installs it into a venv)."""
import sys

try:
    import pytest
except ImportError:
    print(f"pytest is not installed for {sys.executable}; tools/bootstrap.sh installs it "
          "(python3 -m pip install pytest)")
    sys.exit(77)

sys.exit(pytest.main(sys.argv[1:]))
