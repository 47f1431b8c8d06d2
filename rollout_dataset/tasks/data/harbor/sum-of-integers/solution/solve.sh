#!/bin/bash
cat > /app/solution.py <<'EOF'
import sys

tokens = sys.stdin.read().split()
n = int(tokens[0]) if tokens else 0
print(sum(int(x) for x in tokens[1:1 + n]))
EOF
