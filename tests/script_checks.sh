# Sourced by the script tests (tests/*_test.sh): skip, with ctest's skip code 4 and a message
# saying what to install, when a python module or the decoded data is missing.
require_python_modules() {  # PYTHON "module[,module...]" "Debian packages"
  local imports=${2//,/, }
  if ! "$1" -c "import $imports" 2>/dev/null; then
    echo "SKIPPED: $1 cannot import $imports (apt-get install $3)"
    exit 4
  fi
}
require_data() {  # DATA_DIR
  if [ ! -f "$1/test_batch.bin" ]; then
    echo "SKIPPED: no decoded CIFAR-10 at $1 (scripts/test.sh decodes it)"
    exit 4
  fi
}
