#!/bin/bash
cat > /app/solution.py <<'EOF'
import sys

line = sys.stdin.readline()
print(" ".join(reversed(line.split())))
EOF
