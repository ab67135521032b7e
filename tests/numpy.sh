# shellcheck shell=bash disable=SC2034
# Sourced by the tests that check numbers with Python: sets $python to the
# first of Debian's /usr/bin/python3 (which also has python3-torch for the
# tools) and the python3 on PATH (a GPU machine's, with numpy and torch) that
# has numpy, and $tools; or exits 77 (ctest: skipped) when neither has numpy.
python=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c 'import numpy' 2> /dev/null; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "SKIP: no python3 with numpy (apt-get install python3-numpy)"
  exit 77
fi
tools=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools" && pwd)
