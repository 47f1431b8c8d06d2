#!/bin/bash
# The verifier: /app/solution.py on every held-out case of cases.json; reward = the fraction passed.
mkdir -p /logs/verifier
python3 - <<'PY'
import json, subprocess
cases = json.load(open("/tests/cases.json"))
passed = 0
for case in cases:
    try:
        run = subprocess.run(["python3", "/app/solution.py"], input=case["input"], capture_output=True,
                             text=True, timeout=10)
        ok = run.stdout.rstrip() == case["output"].rstrip()
    except subprocess.TimeoutExpired:
        ok = False
    passed += ok
    print("PASS" if ok else "FAIL")
open("/logs/verifier/reward.txt", "w").write(str(round(passed / len(cases), 4)))
PY
