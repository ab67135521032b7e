# shellcheck shell=bash disable=SC2034
# Sourced by the tests that check numbers with Python: sets $python (Debian's
# /usr/bin/python3 when there, which also has python3-torch for the tools) and
# $tools, or exits 77 (ctest: skipped) when numpy is missing.
python=/usr/bin/python3
[ -x "$python" ] || python=python3
if ! "$python" -c 'import numpy' 2> /dev/null; then
  echo "SKIP: $python has no numpy (apt-get install python3-numpy)"
  exit 77
fi
tools=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools" && pwd)
