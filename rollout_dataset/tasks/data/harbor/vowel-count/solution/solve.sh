#!/bin/bash
cat > /app/solution.py <<'EOF'
import sys

for line in sys.stdin.read().splitlines():
    print(sum(1 for c in line if c in "aeiouAEIOU"))
EOF
